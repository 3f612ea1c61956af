package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ErrorBody is the inner object of an OpenAI error envelope.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"` // the HTTP status, as vLLM does
	// CodeName is a string code, as OpenAI sends for some errors
	// ("model_not_found"); such a body's Code is 0. Decoding only: a body
	// with one is written by WriteCodedError.
	CodeName string `json:"-"`
}

// UnmarshalJSON accepts code as a number (vLLM's, the HTTP status) or a
// string (OpenAI's, into CodeName).
func (b *ErrorBody) UnmarshalJSON(data []byte) error {
	type plain ErrorBody
	var raw struct {
		plain
		Code json.RawMessage `json:"code"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*b = ErrorBody(raw.plain)
	switch {
	case len(raw.Code) == 0 || string(raw.Code) == "null":
	case raw.Code[0] == '"':
		return json.Unmarshal(raw.Code, &b.CodeName)
	default:
		return json.Unmarshal(raw.Code, &b.Code)
	}
	return nil
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

// WriteCodedError writes an error envelope whose code is a string, as
// OpenAI's own are ("model_not_found"), rather than the HTTP status.
func WriteCodedError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	body := struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}{}
	body.Error.Message, body.Error.Type, body.Error.Code = msg, typ, code
	if param != "" {
		body.Error.Param = &param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// WriteJSON writes v as a JSON response with status 200.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Methods tried to tell a wrong method (405) from an unknown path (404).
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Mux serves mux, but answers a request no pattern matches in the error
// envelope: 405 (with Allow) when the path is served under other methods,
// else 404. net/http's own answers are plain text, which OpenAI clients
// fail to parse.
func Mux(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		var allow []string
		probe := r.Clone(r.Context())
		for _, m := range probeMethods {
			if m == r.Method {
				continue
			}
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			WriteError(w, http.StatusMethodNotAllowed, TypeInvalidRequest, "",
				fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
			return
		}
		WriteError(w, http.StatusNotFound, TypeNotFound, "", fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
}
