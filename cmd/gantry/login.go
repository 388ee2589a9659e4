package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/clilogin"
)

var cliHTTP = &http.Client{Timeout: 30 * time.Second}

// serverURL picks the Gantry server: the flag, $GANTRY_SERVER, the server signed
// in to last, or the local default.
func serverURL(flagValue string, f clilogin.File) string {
	switch {
	case flagValue != "":
		return strings.TrimSuffix(flagValue, "/")
	case os.Getenv("GANTRY_SERVER") != "":
		return strings.TrimSuffix(os.Getenv("GANTRY_SERVER"), "/")
	case f.Current != "":
		return f.Current
	}
	return "http://127.0.0.1:8080"
}

// credentials reads the credentials file and picks the server.
func credentials(flagServer string) (path string, f clilogin.File, target string, err error) {
	if path, err = clilogin.Path(); err != nil {
		return
	}
	if f, err = clilogin.Load(path); err != nil {
		return
	}
	return path, f, serverURL(flagServer, f), nil
}

// loginCmd signs the CLI in with the device grant and stores the credentials.
func loginCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry login", stderr)
	srv := fs.String("server", "", "Gantry server URL (default: $GANTRY_SERVER, the last one, or http://127.0.0.1:8080)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	path, f, target, err := credentials(*srv)
	if err != nil {
		return err
	}
	c, err := clilogin.Login(ctx, cliHTTP, target, func(uri, complete, code string) {
		fmt.Fprintf(stdout, "To sign in, open %s and enter the code %s\n(or open %s)\nWaiting...\n", uri, code, complete)
	})
	if err != nil {
		return err
	}
	f.Servers[target], f.Current = c, target
	if err := f.Save(path); err != nil {
		return fmt.Errorf("save credentials: %w", err)
	}
	me, err := whoami(ctx, &c)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Signed in to %s as %s. Credentials: %s\n", target, me.display(), path)
	return nil
}

type me struct {
	Issuer      string   `json:"issuer"`
	Subject     string   `json:"subject"`
	Email       string   `json:"email"`
	Name        string   `json:"name"`
	Groups      []string `json:"groups"`
	Via         string   `json:"via"`
	LaunchTeams []string `json:"launchTeams"`
	AllTeams    bool     `json:"allTeams"`
}

func (m me) display() string {
	switch {
	case m.Name != "" && m.Email != "":
		return m.Name + " <" + m.Email + ">"
	case m.Email != "":
		return m.Email
	}
	return m.Subject
}

// whoamiCmd prints who the stored credentials sign in as, refreshing them
// first when they have expired.
func whoamiCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry whoami", stderr)
	srv := fs.String("server", "", "Gantry server URL (default: $GANTRY_SERVER, the last one signed in to)")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	// As every other verb: $GANTRY_TOKEN (with $GANTRY_SERVER) when set,
	// else what gantry login stored (refreshed, and the refresh kept).
	cl, target, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	resp, err := cl.GetMeWithResponse(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	if resp.StatusCode() == http.StatusUnauthorized {
		return fmt.Errorf("%s refused the credentials: %w", target, clilogin.ErrNotSignedIn)
	}
	if resp.StatusCode() != http.StatusOK {
		return problem(resp.StatusCode(), resp.Body)
	}
	var m me
	if err := json.Unmarshal(resp.Body, &m); err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(m)
	}
	teams := strings.Join(m.LaunchTeams, ", ")
	if m.AllTeams {
		teams = "every team"
	} else if teams == "" {
		teams = "no team"
	}
	fmt.Fprintf(stdout, "%s\nsubject: %s at %s\ngroups:  %s\nlaunch:  %s\nserver:  %s\n", m.display(), m.Subject, m.Issuer, strings.Join(m.Groups, ", "), teams, target)
	return nil
}

// whoami asks the server's /api/v1/me with a fresh ID token.
func whoami(ctx context.Context, c *clilogin.Credentials) (me, error) {
	var m me
	tok, _, err := c.Fresh(ctx, cliHTTP, time.Now())
	if err != nil {
		return m, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+"/api/v1/me", nil)
	if err != nil {
		return m, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := cliHTTP.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return m, fmt.Errorf("%s refused the stored credentials: %w", c.Server, clilogin.ErrNotSignedIn)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return m, errors.New(c.Server + " answered " + resp.Status + ": " + strings.TrimSpace(string(b)))
	}
	return m, json.NewDecoder(resp.Body).Decode(&m)
}
