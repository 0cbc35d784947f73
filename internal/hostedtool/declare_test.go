package hostedtool

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestCheckAllowedCallers(t *testing.T) {
	for _, tc := range []struct {
		value   string
		refused bool
	}{
		{`null`, false},
		{`[]`, false},
		{`["direct"]`, false},
		{`["direct","direct"]`, false},
		{`["program"]`, true},
		{`["direct","program"]`, true},
		{`"direct"`, true},
		{`[1]`, true},
	} {
		err := CheckAllowedCallers("tools[2].allowed_callers", gjson.Parse(tc.value))
		switch {
		case tc.refused && err == nil:
			t.Errorf("%s: accepted, want a 400", tc.value)
		case tc.refused && (err.Param != "tools[2].allowed_callers" || err.Code != "unsupported_parameter" || err.Status != 400):
			t.Errorf("%s: %+v, want a 400 unsupported_parameter on tools[2].allowed_callers", tc.value, err)
		case !tc.refused && err != nil:
			t.Errorf("%s: refused: %v", tc.value, err)
		}
	}
}
