package devidp_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/gantryhq/gantry/internal/devidp"
)

var alice = devidp.User{Username: "alice", Password: "pw-alice", Name: "Alice Example", Email: "alice@example.dev", Groups: []string{"ml-vision"}}

// provider starts a provider with a web client whose redirect URI is rp.
func provider(t *testing.T, redirect string) (*devidp.Provider, *oidc.Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := devidp.Start(ctx, "127.0.0.1:0", devidp.Options{
		Users: []devidp.User{alice},
		Clients: []devidp.Client{
			{ID: "web", Secret: "s3cret", RedirectURIs: []string{redirect}},
			{ID: "cli", Device: true},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	op, err := oidc.NewProvider(ctx, p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	return p, op
}

func browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second}
}

type claims struct {
	Email  string   `json:"email"`
	Name   string   `json:"name"`
	Groups []string `json:"groups"`
}

// TestCodeFlowWithPKCE signs in through the password form and checks that the
// ID token carries the nonce, profile, email and groups, and that a wrong
// verifier or a reused code gets nothing.
func TestCodeFlowWithPKCE(t *testing.T) {
	ctx := context.Background()
	codes := make(chan string, 1)
	rp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		codes <- r.URL.Query().Get("code")
	}))
	defer rp.Close()
	p, op := provider(t, rp.URL+"/cb")
	cfg := oauth2.Config{ClientID: "web", ClientSecret: "s3cret", RedirectURL: rp.URL + "/cb", Endpoint: op.Endpoint(),
		Scopes: []string{oidc.ScopeOpenID, "profile", "email", devidp.ScopeGroups}}
	verifier := oauth2.GenerateVerifier()
	start := cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), oidc.Nonce("n-1"))

	if _, body, err := devidp.SignIn(ctx, browser(), start, "alice", "wrong"); err == nil {
		t.Fatalf("a wrong password signed in: %s", body)
	}
	resp, _, err := devidp.SignIn(ctx, browser(), start, "alice", "pw-alice")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("sign in: %v %v", err, resp)
	}
	code := <-codes
	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption("not-the-verifier-"+verifier)); err == nil {
		t.Fatal("a wrong PKCE verifier got tokens")
	}
	// The failed exchange did not burn a fresh sign-in's code: sign in again.
	if _, _, err := devidp.SignIn(ctx, browser(), start, "alice", "pw-alice"); err != nil {
		t.Fatal(err)
	}
	code = <-codes
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err == nil {
		t.Error("a code was exchanged twice")
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := op.Verifier(&oidc.Config{ClientID: "web"}).Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	idt.Claims(&c)
	if idt.Nonce != "n-1" || idt.Subject != alice.Subject() || c.Email != alice.Email || c.Name != alice.Name || !slices.Equal(c.Groups, alice.Groups) {
		t.Errorf("ID token: nonce %q subject %q claims %+v", idt.Nonce, idt.Subject, c)
	}
	if p.Issuer() != idt.Issuer {
		t.Errorf("issuer %q, want %q", idt.Issuer, p.Issuer())
	}
}

// TestDeviceGrantAndRefresh runs RFC 8628 end to end, then refreshes.
func TestDeviceGrantAndRefresh(t *testing.T) {
	ctx := context.Background()
	_, op := provider(t, "http://127.0.0.1:1/cb")
	var disc struct {
		Device string `json:"device_authorization_endpoint"`
	}
	op.Claims(&disc)
	ep := op.Endpoint()
	ep.DeviceAuthURL = disc.Device
	cfg := oauth2.Config{ClientID: "cli", Endpoint: ep, Scopes: []string{oidc.ScopeOpenID, "profile", "email", devidp.ScopeGroups, oidc.ScopeOfflineAccess}}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := devidp.ApproveDevice(ctx, browser(), da.VerificationURI, da.UserCode, "alice", "bad", true); err == nil {
		t.Fatal("a wrong password approved the device")
	}
	if err := devidp.ApproveDevice(ctx, browser(), da.VerificationURI, da.UserCode, "alice", "pw-alice", true); err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken == "" || tok.Extra("id_token") == nil {
		t.Fatalf("device token without refresh or ID token: %+v", tok)
	}
	tok.Expiry = time.Now().Add(-time.Minute)
	fresh, err := cfg.TokenSource(ctx, tok).Token()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := fresh.Extra("id_token").(string)
	idt, err := op.Verifier(&oidc.Config{ClientID: "cli"}).Verify(ctx, raw)
	if err != nil {
		t.Fatalf("refreshed ID token: %v", err)
	}
	var c claims
	idt.Claims(&c)
	if !slices.Equal(c.Groups, alice.Groups) || fresh.RefreshToken == tok.RefreshToken {
		t.Errorf("refresh: groups %v, refresh token rotated: %v", c.Groups, fresh.RefreshToken != tok.RefreshToken)
	}
	// The old refresh token was rotated away.
	if _, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token(); err == nil {
		t.Error("a rotated refresh token still works")
	}
	// A denied device gets an access_denied.
	da2, _ := cfg.DeviceAuth(ctx)
	if err := devidp.ApproveDevice(ctx, browser(), da2.VerificationURI, da2.UserCode, "alice", "pw-alice", false); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.DeviceAccessToken(ctx, da2); err == nil {
		t.Error("a denied device got a token")
	}
}
