// Package clilogin owns signing the command line in: the OAuth 2.0 device
// authorization grant (RFC 8628) against the provider a Gantry server names
// at /auth/config, the credentials file in the user's config directory (mode
// 0600, written atomically), and refreshing the ID token with the refresh
// token when it has expired.
package clilogin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Credentials are one server's sign-in.
type Credentials struct {
	Server       string    `json:"server"`
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"clientID"`
	Scopes       []string  `json:"scopes"`
	TokenURL     string    `json:"tokenURL"`
	IDToken      string    `json:"idToken"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	Expiry       time.Time `json:"expiry"` // the ID token's
}

// File is the credentials file: a sign-in per server, and the one used last.
type File struct {
	Current string                 `json:"current"`
	Servers map[string]Credentials `json:"servers"`
}

// ErrNotSignedIn means there are no credentials for the server, or they can no
// longer be refreshed.
var ErrNotSignedIn = errors.New("not signed in: run gantry login")

// Path is where credentials live: $XDG_CONFIG_HOME/gantry/credentials.json
// (~/.config/gantry/credentials.json).
func Path() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "gantry", "credentials.json"), nil
}

// Load reads the file; a missing file is an empty one.
func Load(path string) (File, error) {
	f := File{Servers: map[string]Credentials{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s is not a credentials file (%v): remove it and run gantry login", path, err)
	}
	if f.Servers == nil {
		f.Servers = map[string]Credentials{}
	}
	return f, nil
}

// Save writes the file with mode 0600 (its directory 0700), replacing it in
// one step so that a crash leaves the old file or the new one.
func (f File) Save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Prompt shows the user where to go and which code to enter.
type Prompt func(verificationURI, verificationURIComplete, userCode string)

type authConfig struct {
	Issuer      string   `json:"issuer"`
	CLIClientID string   `json:"cliClientID"`
	Scopes      []string `json:"scopes"`
}

// Login signs in to server with the device grant: it asks the server which
// provider and client to use, starts the grant, prompts, and waits until the
// user allows or denies it in a browser (or the code expires).
func Login(ctx context.Context, hc *http.Client, server string, prompt Prompt) (Credentials, error) {
	server = strings.TrimSuffix(server, "/")
	ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	var ac authConfig
	if err := getJSON(ctx, hc, server+"/auth/config", &ac); err != nil {
		return Credentials{}, fmt.Errorf("ask %s how to sign in: %w", server, err)
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, hc), ac.Issuer)
	if err != nil {
		return Credentials{}, fmt.Errorf("discover the OpenID provider %s: %w", ac.Issuer, err)
	}
	var disc struct {
		Device string `json:"device_authorization_endpoint"`
	}
	if err := p.Claims(&disc); err != nil || disc.Device == "" {
		return Credentials{}, fmt.Errorf("the OpenID provider %s does not offer the device authorization grant", ac.Issuer)
	}
	ep := p.Endpoint()
	ep.DeviceAuthURL = disc.Device
	ep.AuthStyle = oauth2.AuthStyleInParams // a public client: no secret to send
	cfg := oauth2.Config{ClientID: ac.CLIClientID, Endpoint: ep, Scopes: ac.Scopes}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		return Credentials{}, fmt.Errorf("start the device sign-in: %w", err)
	}
	prompt(da.VerificationURI, da.VerificationURIComplete, da.UserCode)
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		return Credentials{}, fmt.Errorf("device sign-in: %w", err)
	}
	c := Credentials{Server: server, Issuer: ac.Issuer, ClientID: ac.CLIClientID, Scopes: ac.Scopes, TokenURL: ep.TokenURL}
	if err := c.take(tok); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

func (c *Credentials) take(tok *oauth2.Token) error {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return errors.New("the provider returned no ID token")
	}
	exp, err := expiry(raw)
	if err != nil {
		return err
	}
	c.IDToken, c.Expiry = raw, exp
	if tok.RefreshToken != "" {
		c.RefreshToken = tok.RefreshToken
	}
	return nil
}

// Fresh returns an ID token good for at least another 30 seconds, refreshing
// it first when needed; refreshed says the credentials changed and should be
// saved.
func (c *Credentials) Fresh(ctx context.Context, hc *http.Client, now time.Time) (idToken string, refreshed bool, err error) {
	if c.IDToken != "" && now.Add(30*time.Second).Before(c.Expiry) {
		return c.IDToken, false, nil
	}
	if c.RefreshToken == "" {
		return "", false, ErrNotSignedIn
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	cfg := oauth2.Config{ClientID: c.ClientID, Endpoint: oauth2.Endpoint{TokenURL: c.TokenURL, AuthStyle: oauth2.AuthStyleInParams}, Scopes: c.Scopes}
	tok, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: c.RefreshToken, Expiry: now.Add(-time.Minute)}).Token()
	if err != nil {
		return "", false, fmt.Errorf("%w (refresh failed: %v)", ErrNotSignedIn, err)
	}
	if err := c.take(tok); err != nil {
		// Some providers answer a refresh without a new ID token (the
		// spec allows it): only a new sign-in gets one.
		return "", false, fmt.Errorf("%w (the refresh brought no usable ID token: %v)", ErrNotSignedIn, err)
	}
	return c.IDToken, true, nil
}

// expiry reads a JWT's exp claim without verifying it: the server verifies;
// the CLI only needs to know when to refresh.
func expiry(raw string) (time.Time, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("the ID token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("the ID token's payload: %w", err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(b, &claims); err != nil || claims.Exp == 0 {
		return time.Time{}, errors.New("the ID token has no exp claim")
	}
	return time.Unix(claims.Exp, 0), nil
}

func getJSON(ctx context.Context, hc *http.Client, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
