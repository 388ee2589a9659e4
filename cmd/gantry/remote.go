package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/internal/clilogin"
	"github.com/gantryhq/gantry/internal/fault"
)

// remote is the API of the server the CLI talks to, signed in: with
// $GANTRY_TOKEN (a personal access token) when set, else with the ID token
// `gantry login` stored for that server (refreshed, and the refresh kept,
// when it is due).
func remote(ctx context.Context, flagServer string) (*client.ClientWithResponses, string, error) {
	path, f, target, err := credentials(flagServer)
	if err != nil {
		return nil, "", err
	}
	token := os.Getenv("GANTRY_TOKEN")
	if token == "" {
		c, ok := f.Servers[target]
		if !ok {
			return nil, target, fmt.Errorf("%s: %w (or set GANTRY_TOKEN)", target, clilogin.ErrNotSignedIn)
		}
		tok, refreshed, err := c.Fresh(ctx, cliHTTP, time.Now())
		if err != nil {
			return nil, target, fmt.Errorf("%s: %w", target, err)
		}
		if refreshed {
			f.Servers[target] = c
			if err := f.Save(path); err != nil {
				return nil, target, fmt.Errorf("save refreshed credentials: %w", err)
			}
		}
		token = tok
	}
	cl, err := client.NewClientWithResponses(target, client.WithHTTPClient(cliHTTP),
		client.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		return nil, target, fmt.Errorf("server %s: %w", target, err)
	}
	return cl, target, nil
}

// problem turns an answer that is not a success into the error a person
// reads: the server's title and detail, and each field problem (as
// *fault.Invalid, so that report lists them one a line).
func problem(status int, body []byte) error {
	var p struct {
		Title, Detail string
		Errors        []struct {
			Field, Detail, File string
			Line                int
		}
	}
	if json.Unmarshal(body, &p) != nil || (p.Title == "" && p.Detail == "") {
		text := strings.TrimSpace(string(body))
		if len(text) > 300 {
			text = text[:300] + "…"
		}
		return fmt.Errorf("the server answered %d %s: %s", status, http.StatusText(status), text)
	}
	if len(p.Errors) > 0 {
		inv := &fault.Invalid{}
		for _, e := range p.Errors {
			inv.Fields = append(inv.Fields, fault.Field{File: e.File, Line: e.Line, Path: e.Field, Message: e.Detail})
		}
		return inv
	}
	msg := p.Title
	if p.Detail != "" {
		msg = p.Detail
	}
	return fmt.Errorf("%s (%d)", msg, status)
}

// ok returns err (a request that got no answer), or the problem an answer
// that is not 2xx says. resp is a generated *…Response: its status and raw
// Body.
func ok(resp any, err error) error {
	if err != nil {
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("the server did not answer in time: %w", err)
		}
		return err
	}
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return errors.New("no answer from the server")
	}
	code := 0
	if s, isAnswer := resp.(interface{ StatusCode() int }); isAnswer {
		code = s.StatusCode()
	}
	if code/100 == 2 {
		return nil
	}
	var raw []byte
	if f := v.Elem().FieldByName("Body"); f.IsValid() && f.Kind() == reflect.Slice {
		raw = f.Bytes()
	}
	return problem(code, raw)
}
