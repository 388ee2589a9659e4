package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/jsonscan"
)

// PermissionExtension is the vendor extension in which every operation of
// openapi.yaml declares the permission it needs, or Public.
const PermissionExtension = "x-gantry-permission"

// Public, as an operation's permission, needs no identity; Authenticated needs
// one and nothing more; Agent needs a node agent's identity and Run a
// training run's (and no user's identity passes either).
const (
	Public        = "public"
	Authenticated = "authenticated"
	Agent         = "agent"
	Run           = "run"
)

// permissionOf returns an operation's declared permission.
func permissionOf(op *openapi3.Operation) string {
	p, _ := op.Extensions[PermissionExtension].(string)
	return p
}

// checkPermissions refuses a spec with an operation that declares no known
// permission: no route is reachable without a decision about who may call it.
func checkPermissions(doc *openapi3.T) error {
	var bad []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			p := permissionOf(op)
			if _, known := access.Parse(p); p != Public && p != Authenticated && p != Agent && p != Run && !known {
				bad = append(bad, fmt.Sprintf("%s %s (%q)", method, path, p))
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("openapi.yaml: operations without a known %s: %s", PermissionExtension, strings.Join(bad, ", "))
	}
	return nil
}

// parsedSpecs holds the parsed specs' routers by the spec's digest: a router is
// read-only once built, and parsing and checking the spec is a large part of
// starting a server (tests start hundreds in one process).
var parsedSpecs struct {
	sync.Mutex
	routers map[[32]byte]routers.Router
}

// specRouter parses, validates and routes spec, once per process per spec.
func specRouter(spec []byte) (routers.Router, error) {
	key := sha256.Sum256(spec)
	parsedSpecs.Lock()
	defer parsedSpecs.Unlock()
	if r, ok := parsedSpecs.routers[key]; ok {
		return r, nil
	}
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.yaml is invalid: %w", err)
	}
	if err := checkPermissions(doc); err != nil {
		return nil, err
	}
	doc.Servers = nil // match on paths alone, whatever host serves them
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.yaml: %w", err)
	}
	if parsedSpecs.routers == nil {
		parsedSpecs.routers = map[[32]byte]routers.Router{}
	}
	parsedSpecs.routers[key] = router
	return router, nil
}

// validator checks every request that matches a route of the spec: first that
// the caller holds the route's permission somewhere (401 without an identity,
// 403 without the permission), then the request against the spec (parameters
// and body, every failure at once), before any handler runs.
func validator(spec []byte, authorize func(identity.Identity, access.Permission) bool, rolesWith func(access.Permission) []string,
	needsSecondFactor func(identity.Identity, access.Permission) bool) (echo.MiddlewareFunc, error) {
	router, err := specRouter(spec)
	if err != nil {
		return nil, err
	}
	opts := &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			route, params, err := router.FindRoute(req)
			if err != nil {
				if err == routers.ErrMethodNotAllowed {
					return echo.ErrMethodNotAllowed
				}
				if p := req.URL.Path; p == "/api" || strings.HasPrefix(p, "/api/") {
					// Nothing under /api is served that the spec does not
					// declare (with its permission): refused before any handler.
					return echo.ErrNotFound
				}
				return next(c) // the portal's pages and files
			}
			if perm := permissionOf(route.Operation); perm != Public {
				id, ok := identity.From(req.Context())
				if !ok {
					return echo.NewHTTPError(http.StatusUnauthorized, "not authenticated")
				}
				if (perm == Agent) != (id.Via == identity.ViaAgent) {
					return &fault.Forbidden{Reason: "only a node's gantry-agent calls this, and it calls nothing else"}
				}
				if (perm == Run) != (id.Via == identity.ViaRun) {
					return &fault.Forbidden{Reason: "only a training run, with the token Gantry mounts in its pod (GANTRY_RUN_TOKEN_FILE), calls this, and it calls nothing else"}
				}
				p, _ := access.Parse(perm) // checked at start: known
				if perm != Authenticated && perm != Agent && perm != Run && (authorize == nil || !authorize(id, p)) {
					if needsSecondFactor != nil && needsSecondFactor(id, p) {
						how := "sign in again with one"
						if id.Via == identity.ViaToken {
							how = "this token was made from a sign-in without one: sign in with a second factor and make a new token"
						}
						return &fault.Forbidden{SecondFactor: true, Reason: fmt.Sprintf("the %s permission needs a second factor at sign-in, and yours had none: %s", perm, how)}
					}
					return &fault.Forbidden{Reason: refusal(id, perm, authorize, rolesWith)}
				}
			}
			if err := checkBody(req); err != nil {
				return err
			}
			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
			if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
				return err
			}
			return next(c)
		}
	}, nil
}

// checkBody reads a JSON body (within the body limit) and walks it once
// (jsonscan) before anything decodes it: a body nested deeper or wider than
// any request of the spec, or naming a key twice in one object (decoders keep
// the last, so what was checked and what is used could differ; template files
// refuse them too), is refused with the field's path in time linear in its
// size. The body is put back for what follows; one that is not JSON is left
// to the spec validation.
func checkBody(req *http.Request) error {
	if req.Body == nil || req.Body == http.NoBody || !strings.Contains(strings.ToLower(req.Header.Get("Content-Type")), "json") {
		return nil
	}
	data, err := io.ReadAll(req.Body)
	if err != nil {
		return err // the body limit's 413, among others
	}
	req.Body = io.NopCloser(bytes.NewReader(data))
	if err := jsonscan.Check(req.Context(), data, jsonscan.Default); err != nil && !errors.Is(err, jsonscan.ErrNotJSON) {
		return err
	}
	return nil
}

// refusal says which permission a caller lacks and which roles grant it, so
// a person knows whom to ask: roles are bound to groups per team by the
// platform team (policy/bindings.yaml).
//
// Whom to ask is whoever may change the policy (the roles holding
// policy:write); a caller who may change it is told to bind the group
// themselves.
func refusal(id identity.Identity, perm string, authorize func(identity.Identity, access.Permission) bool, rolesWith func(access.Permission) []string) string {
	msg := fmt.Sprintf("you need the %s permission", perm)
	p, ok := access.Parse(perm)
	if !ok || rolesWith == nil {
		return msg
	}
	roles := rolesWith(p)
	if len(roles) == 0 {
		return msg
	}
	msg += fmt.Sprintf(", which the %s role%s grant%s", strings.Join(roles, ", "), plural(len(roles), "s", ""), plural(len(roles), "", "s"))
	switch editors := rolesWith(access.PolicyWrite); {
	case authorize != nil && authorize(id, access.PolicyWrite):
		msg += ": you may change the policy yourself — bind your group to one of them in policy/bindings.yaml"
	case len(editors) > 0:
		msg += fmt.Sprintf(": ask someone with the %s role (who may change the policy) to bind your group to one of them in policy/bindings.yaml", strings.Join(editors, " or "))
	default:
		msg += ": ask whoever keeps policy/bindings.yaml to bind your group to one of them"
	}
	return msg
}

// plural picks many when n is not 1.
func plural(n int, many, one string) string {
	if n == 1 {
		return one
	}
	return many
}
