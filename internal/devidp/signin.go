package devidp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// SignIn plays a browser for tests and scripts: it opens start (a relying
// party's login URL) with c, which must keep cookies, fills the provider's
// password form and follows the redirects back. It returns the last response,
// its body read into the string.
func SignIn(ctx context.Context, c *http.Client, start, username, password string) (*http.Response, string, error) {
	resp, body, err := do(ctx, c, http.MethodGet, start, nil)
	if err != nil {
		return nil, "", err
	}
	u := resp.Request.URL
	if u.Path != "/login" || u.Query().Get("id") == "" {
		return resp, body, fmt.Errorf("devidp: %s did not lead to the sign-in form (ended at %s, status %d)", start, u, resp.StatusCode)
	}
	form := url.Values{"id": {u.Query().Get("id")}, "username": {username}, "password": {password}}
	resp, body, err = do(ctx, c, http.MethodPost, u.Scheme+"://"+u.Host+"/login", form)
	if err == nil && resp.Request.URL.Host == u.Host && resp.StatusCode >= 400 {
		err = fmt.Errorf("devidp: sign-in refused (%d)", resp.StatusCode)
	}
	return resp, body, err
}

// ApproveDevice plays the user of a device grant: it opens the verification
// page, enters the user code and signs in, allowing or denying the device.
func ApproveDevice(ctx context.Context, c *http.Client, verificationURI, userCode, username, password string, allow bool) error {
	action := "deny"
	if allow {
		action = "allow"
	}
	form := url.Values{"user_code": {userCode}, "username": {username}, "password": {password}, "action": {action}}
	resp, body, err := do(ctx, c, http.MethodPost, verificationURI, form)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("devidp: device approval answered %d: %s", resp.StatusCode, body)
	}
	return nil
}

func do(ctx context.Context, c *http.Client, method, target string, form url.Values) (*http.Response, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}
