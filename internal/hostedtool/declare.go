package hostedtool

import (
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
)

// CheckAllowedCallers validates a Responses API declaration's
// allowed_callers (v, at param): null or an array listing only "direct".
// The model calls a hosted tool directly; nothing here lets code call it
// (OpenAI's "program" callers), so any other caller is refused rather than
// ignored.
func CheckAllowedCallers(param string, v gjson.Result) *apierror.Error {
	ok := v.Type == gjson.Null || v.IsArray()
	if v.IsArray() { // ForEach calls a scalar's iterator with the scalar itself
		v.ForEach(func(_, c gjson.Result) bool {
			ok = ok && c.Str == "direct"
			return ok
		})
	}
	if !ok {
		return apierror.Invalid(param, "unsupported_parameter", "Only direct calls are supported: '%s' may only list \"direct\".", param)
	}
	return nil
}
