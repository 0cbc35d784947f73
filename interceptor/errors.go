package interceptor

import (
	"encoding/json"
	"net/http"
)

// body renders e as OpenAI's error JSON; empty Param and Code become null.
func (e *APIError) body() []byte {
	type inner struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	in := inner{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		in.Param = &e.Param
	}
	if e.Code != "" {
		in.Code = &e.Code
	}
	b, err := json.Marshal(struct {
		Error inner `json:"error"`
	}{in})
	if err != nil { // cannot happen: strings only
		return []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`)
	}
	return b
}

// invalid is a 400 invalid_request_error naming param.
func invalid(param, code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: sprintf(format, args...), Param: param, Code: code}
}
