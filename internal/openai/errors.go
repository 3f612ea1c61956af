package openai

import (
	"encoding/json"
	"net/http"
)

// ErrorBody is the inner object of an OpenAI error envelope.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"` // the HTTP status, as vLLM does
}

// ErrorResponse is the envelope {"error": {...}}.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// Error types, following the OpenAI API.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeNotFound       = "not_found_error"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable_error"
	TypeRateLimit      = "rate_limit_error"
)

// NewError builds an error envelope. param may be empty.
func NewError(status int, typ, param, msg string) ErrorResponse {
	e := ErrorResponse{Error: ErrorBody{Message: msg, Type: typ, Code: status}}
	if param != "" {
		e.Error.Param = &param
	}
	return e
}

// WriteError writes an OpenAI-shaped error with the given HTTP status.
func WriteError(w http.ResponseWriter, status int, typ, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(NewError(status, typ, param, msg))
}

// WriteJSON writes v as a JSON response with status 200.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
