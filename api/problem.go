package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
)

// Problem types (RFC 9457). Anything else is about:blank with the status's title.
const (
	problemValidation = "https://gantry.dev/problems/validation"
	problemNotFound   = "https://gantry.dev/problems/not-found"
	problemConflict   = "https://gantry.dev/problems/conflict"
	// ProblemSecondFactor is a refusal that a sign-in with a second factor
	// would lift: the portal sends the person through one
	// (/auth/login?secondFactor=1).
	ProblemSecondFactor = "https://gantry.dev/problems/second-factor-required"
)

// problemFor maps an error to a status and problem document. It is the one place
// where errors become HTTP responses; internal errors are logged, never shown.
func problemFor(err error) (int, model.Problem) {
	var (
		inv  *fault.Invalid
		mal  *fault.Malformed
		tm   *fault.TooMany
		st   *fault.Stale
		nf   *fault.NotFound
		conf *fault.Conflict
		fb   *fault.Forbidden
		un   *fault.Unavailable
		he   *echo.HTTPError
		re   *openapi3filter.RequestError
		se   *openapi3filter.SecurityRequirementsError
		ir   *fault.ImageRefused
	)
	switch {
	case errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge:
		// First: a chunked body past the limit surfaces while the spec
		// validation reads it, wrapped in its RequestError.
		return he.Code, model.Problem{Type: "about:blank", Title: http.StatusText(he.Code), Detail: ptr("the request body is larger than this server accepts")}
	case errors.As(err, &ir):
		fields := []model.FieldError{{Field: "image", Detail: ir.Check + " check: " + ir.Reason}}
		return http.StatusUnprocessableEntity, model.Problem{Type: "https://gantry.dev/problems/image-refused", Title: "Image refused", Detail: ptr(ir.Error()), Errors: &fields}
	case errors.As(err, &inv):
		return http.StatusUnprocessableEntity, model.Problem{Type: problemValidation, Title: "Invalid request", Detail: ptr(detailOf(len(inv.Fields))), Errors: fieldErrors(inv.Fields)}
	case errors.As(err, &st):
		return http.StatusPreconditionFailed, model.Problem{Type: problemConflict, Title: http.StatusText(http.StatusPreconditionFailed), Detail: ptr(st.Error())}
	case errors.As(err, &tm):
		return http.StatusTooManyRequests, model.Problem{Type: "about:blank", Title: http.StatusText(http.StatusTooManyRequests), Detail: ptr(tm.What + "; try again later")}
	case errors.As(err, &mal):
		return http.StatusBadRequest, model.Problem{Type: problemValidation, Title: "Invalid request", Detail: ptr(detailOf(len(mal.Fields))), Errors: fieldErrors(mal.Fields)}
	case errors.As(err, &re), errors.As(err, &se):
		fields := requestFields(err)
		return http.StatusBadRequest, model.Problem{Type: problemValidation, Title: "Invalid request", Detail: ptr(detailOf(len(fields))), Errors: &fields}
	case errors.As(err, &nf):
		return http.StatusNotFound, model.Problem{Type: problemNotFound, Title: "Not found", Detail: ptr(nf.Error())}
	case errors.As(err, &fb) && fb.SecondFactor:
		return http.StatusForbidden, model.Problem{Type: ProblemSecondFactor, Title: "Second factor required", Detail: ptr(fb.Reason)}
	case errors.As(err, &fb):
		return http.StatusForbidden, model.Problem{Type: "https://gantry.dev/problems/forbidden", Title: "Forbidden", Detail: ptr(fb.Reason)}
	case errors.As(err, &conf):
		return http.StatusConflict, model.Problem{Type: problemConflict, Title: "Conflict", Detail: ptr(conf.Error())}
	case errors.As(err, &un):
		return http.StatusServiceUnavailable, model.Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable), Detail: ptr(un.What + " is unavailable; try again later")}
	case errors.As(err, &he):
		title := http.StatusText(he.Code)
		p := model.Problem{Type: "about:blank", Title: title}
		if msg, ok := he.Message.(string); ok && msg != title && he.Code < 500 {
			p.Detail = ptr(msg)
		}
		return he.Code, p
	case errors.Is(err, live.ErrClosed):
		// A live request closed for its credential (revoked, signed out):
		// the workload's refusals are matched above.
		return http.StatusUnauthorized, model.Problem{Type: "about:blank", Title: http.StatusText(http.StatusUnauthorized),
			Detail: ptr("the credential that allowed this request changed (revoked, expired or signed out)")}
	case errors.Is(err, context.Canceled):
		return 499, model.Problem{Type: "about:blank", Title: "Client closed request"}
	}
	return http.StatusInternalServerError, model.Problem{Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError),
		Detail: ptr("an internal error occurred; quote the instance when reporting it")}
}

// maxFieldErrors is how many field problems an answer lists: a large bad
// input (a draft of unknown keys) can have tens of thousands, each with its
// own message; the detail still counts them all.
const maxFieldErrors = 100

// fieldErrors is the wire form of field problems, the first maxFieldErrors.
func fieldErrors(fs []fault.Field) *[]model.FieldError {
	fs = fs[:min(len(fs), maxFieldErrors)]
	fields := make([]model.FieldError, len(fs))
	for i, f := range fs {
		fields[i] = model.FieldError{Field: f.Path, Detail: f.Message}
		if f.File != "" {
			fields[i].File = &f.File
		}
		if f.Line > 0 {
			fields[i].Line = &f.Line
		}
	}
	return &fields
}

func detailOf(n int) string {
	switch {
	case n == 1:
		return "1 problem with the request"
	case n > maxFieldErrors:
		return fmt.Sprintf("%d problems with the request; the first %d are listed", n, maxFieldErrors)
	}
	return fmt.Sprintf("%d problems with the request", n)
}

// requestFields turns kin-openapi's validation errors into field errors, every
// one of them, without the schema dumps kin-openapi puts in its messages.
func requestFields(err error) []model.FieldError {
	var out []model.FieldError
	var walk func(prefix string, err error)
	walk = func(prefix string, err error) {
		switch e := err.(type) {
		case openapi3.MultiError:
			for _, x := range e {
				walk(prefix, x)
			}
		case *openapi3filter.RequestError:
			p := prefix
			switch {
			case e.Parameter != nil:
				p = e.Parameter.In + "." + e.Parameter.Name
			case e.RequestBody != nil:
				p = "body"
			}
			if e.Err == nil {
				out = append(out, model.FieldError{Field: p, Detail: e.Reason})
				return
			}
			walk(p, e.Err)
		case *openapi3.SchemaError:
			path := prefix
			for _, seg := range e.JSONPointer() {
				if seg != "" && seg[0] >= '0' && seg[0] <= '9' {
					path += "[" + seg + "]"
				} else {
					path = fault.JoinPath(path, seg)
				}
			}
			if m := unsupportedRE.FindStringSubmatch(e.Reason); m != nil {
				path = fault.JoinPath(path, m[1])
			}
			if path != "body" {
				path = strings.TrimPrefix(path, "body.")
			}
			out = append(out, model.FieldError{Field: path, Detail: e.Reason})
		case *openapi3filter.ParseError:
			msg := "malformed input"
			if c := e.RootCause(); c != nil {
				msg += ": " + c.Error()
			} else if e.Reason != "" {
				msg += ": " + e.Reason
			}
			out = append(out, model.FieldError{Field: prefix, Detail: msg})
		default:
			if u := errors.Unwrap(err); u != nil {
				walk(prefix, u)
				return
			}
			msg := err.Error()
			if i := strings.Index(msg, "\nSchema:"); i > 0 {
				msg = msg[:i]
			}
			out = append(out, model.FieldError{Field: prefix, Detail: msg})
		}
	}
	walk("", err)
	return out
}

var unsupportedRE = regexp.MustCompile(`^property "([^"]+)" is unsupported$`)

// errorHandler writes every error as problem+json.
func errorHandler(log *slog.Logger, transient func(error) error) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, p := problemFor(err)
		if status == http.StatusInternalServerError {
			// Only an error Gantry has no answer for may be a dependency's
			// refusal (503): one that is the request's keeps its status.
			err = transient(err)
			status, p = problemFor(err)
		}
		p.Status = status
		if tm := (*fault.TooMany)(nil); errors.As(err, &tm) && tm.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(tm.RetryAfter.Seconds()))))
		}
		if id := c.Response().Header().Get(echo.HeaderXRequestID); id != "" {
			p.Instance = ptr("urn:gantry:request:" + id)
		}
		if status >= 500 {
			log.ErrorContext(c.Request().Context(), "request failed", "err", err, "method", c.Request().Method, "path", c.Path())
		}
		if c.Request().Method == http.MethodHead {
			c.NoContent(status)
			return
		}
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		c.Response().WriteHeader(status)
		_ = jsonEncode(c.Response(), p)
	}
}
