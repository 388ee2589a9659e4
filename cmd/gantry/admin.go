package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
)

// verbWithOutput parses a verb's --server and -o flags and signs in.
func verbWithOutput(ctx context.Context, name string, args []string, stderr io.Writer) (*client.ClientWithResponses, []string, string, error) {
	fs := flags(name, stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	rest, err := parse(fs, args)
	if err != nil {
		return nil, nil, "", err
	}
	cl, _, err := remote(ctx, *srv)
	return cl, rest, *output, err
}

// nodesCmd is `gantry nodes ls|get NAME`: the GPU nodes the agents report.
func nodesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "ls" && args[0] != "get") {
		return usageError{"gantry nodes ls | get NAME [-o json]"}
	}
	cl, rest, output, err := verbWithOutput(ctx, "gantry nodes "+args[0], args[1:], stderr)
	if err != nil {
		return err
	}
	var nodes []model.Node
	if args[0] == "get" {
		if len(rest) != 1 {
			return usageError{"gantry nodes get NAME"}
		}
		resp, err := cl.GetNodeWithResponse(ctx, rest[0])
		if err := ok(resp, err); err != nil {
			return err
		}
		nodes = []model.Node{*resp.JSON200}
		if output == "json" {
			return show(stdout, output, nodes[0], nil)
		}
	} else {
		resp, err := cl.ListNodesWithResponse(ctx)
		if err := ok(resp, err); err != nil {
			return err
		}
		nodes = resp.JSON200.Items
	}
	return show(stdout, output, nodes, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tGPUS\tHEALTHY\tSEEN\tAGENT")
		for _, n := range nodes {
			health := "yes"
			if !n.Healthy {
				health = "no"
			}
			if n.Stale {
				health += " (stale)"
			}
			models := map[string]int{}
			var order []string
			for _, g := range n.Gpus {
				if models[g.Gpu] == 0 {
					order = append(order, g.Gpu)
				}
				models[g.Gpu]++
			}
			var gpus []string
			for _, m := range order {
				gpus = append(gpus, fmt.Sprintf("%d× %s", models[m], m))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(n.Name), printable(strings.Join(gpus, ", ")), health, n.SeenAt.Local().Format(time.DateTime), printable(deref(n.Agent)))
		}
		tw.Flush()
	})
}

// usersCmd is `gantry users ls | deactivate ID | reactivate ID` (platform
// admins).
func usersCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "ls" && args[0] != "deactivate" && args[0] != "reactivate") {
		return usageError{"gantry users ls | deactivate ID | reactivate ID"}
	}
	cl, rest, output, err := verbWithOutput(ctx, "gantry users "+args[0], args[1:], stderr)
	if err != nil {
		return err
	}
	if args[0] != "ls" {
		if len(rest) != 1 {
			return usageError{"gantry users " + args[0] + " ID"}
		}
		var u *model.User
		if args[0] == "deactivate" {
			resp, err := cl.DeactivateUserWithResponse(ctx, rest[0])
			if err := ok(resp, err); err != nil {
				return err
			}
			u = resp.JSON200
		} else {
			resp, err := cl.ReactivateUserWithResponse(ctx, rest[0])
			if err := ok(resp, err); err != nil {
				return err
			}
			u = resp.JSON200
		}
		fmt.Fprintf(stdout, "%s (%s): %s\n", u.Id, printable(userName(*u)), map[bool]string{true: "active", false: "deactivated"}[u.Active])
		return nil
	}
	resp, err := cl.ListUsersWithResponse(ctx)
	if err := ok(resp, err); err != nil {
		return err
	}
	return show(stdout, output, resp.JSON200.Items, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tGROUPS\tLAST SEEN\tSTATE")
		for _, u := range resp.JSON200.Items {
			state := "active"
			if !u.Active {
				state = "deactivated"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.Id, printable(userName(u)), printable(strings.Join(u.Groups, ",")), u.LastSeenAt.Local().Format(time.DateTime), state)
		}
		tw.Flush()
	})
}

// userName is how a person reads a user: the name and e-mail the provider
// gave, else the subject.
func userName(u model.User) string {
	name, email := deref(u.Name), deref(u.Email)
	switch {
	case name != "" && email != "":
		return name + " <" + email + ">"
	case name != "":
		return name
	case email != "":
		return email
	}
	return u.Subject
}

// auditListCmd is `gantry audit ls`: the audit log through the API, newest
// first (--before continues), or oldest first with --after.
func auditListCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry audit ls", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	actor := fs.String("actor", "", "only this actor (issuer#subject) and their tokens")
	decision := fs.String("decision", "", "only allow or deny")
	after := fs.Int64("after", -1, "oldest first, only records after this sequence number (0: from the start)")
	before := fs.Int64("before", 0, "newest first (the default), only records before this sequence number")
	limit := fs.Int("limit", 100, "at most this many records")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	p := &model.ListAuditParams{Limit: limit}
	if *actor != "" {
		p.Actor = actor
	}
	if *decision != "" {
		d := model.ListAuditParamsDecision(*decision)
		p.Decision = &d
	}
	if *after >= 0 && *before > 0 {
		return usageError{"gantry audit ls: --before (newest first) or --after (oldest first), not both"}
	}
	if *after >= 0 {
		p.After = after
	}
	if *before > 0 {
		p.Before = before
	}
	resp, err := cl.ListAuditWithResponse(ctx, p)
	if err := ok(resp, err); err != nil {
		return err
	}
	return show(stdout, *output, resp.JSON200, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tAT\tACTOR\tACTION\tOBJECT\tDECISION\tSTATUS\tREASON")
		for _, r := range resp.JSON200.Items {
			actor := r.Actor
			if n := deref(r.ActorName); n != "" {
				actor = n
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Seq, r.At.Local().Format(time.DateTime), printable(actor), printable(r.Action), printable(r.Object), r.Decision, r.Status, printable(r.Reason))
		}
		tw.Flush()
	})
}

// openCmd is `gantry open ID`: where a notebook opens in the browser — the
// server's /w/{id}/ (its in-cluster endpoint is for other pods) — printed,
// and opened in the desktop's browser on a terminal.
func openCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry open", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	cl, id, target, err := oneArgumentTo(ctx, fs, args, srv, "gantry open ID")
	if err != nil {
		return err
	}
	resp, err := cl.GetWorkloadWithResponse(ctx, id)
	if err := ok(resp, err); err != nil {
		return err
	}
	w := resp.JSON200
	if w.Url == nil {
		return fmt.Errorf("workload %s (%s) is a %s: only notebooks open in the browser", w.Id, w.Template, w.Kind)
	}
	if w.Status != model.Running {
		return fmt.Errorf("workload %s is %s: it opens once it is Running (gantry get %s)", w.Id, w.Status, w.Id)
	}
	base, err := url.Parse(target)
	rel, rerr := url.Parse(*w.Url)
	if err != nil || rerr != nil || !strings.HasPrefix(*w.Url, "/") || strings.HasPrefix(*w.Url, "//") {
		return fmt.Errorf("workload %s: the server gave an address that is not a path of its own: %s", w.Id, printable(*w.Url))
	}
	u := base.ResolveReference(rel)
	fmt.Fprintln(stdout, u.String())
	// A desktop's browser: only on a terminal with a display (over SSH
	// xdg-open would take the terminal for a text browser), and not tied to
	// this command's context (it ends as the command returns).
	if isTerminal(stdout) && (os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != "") && (u.Scheme == "http" || u.Scheme == "https") {
		if opener, err := exec.LookPath("xdg-open"); err == nil {
			_ = exec.Command(opener, u.String()).Start()
		}
	}
	return nil
}

// printable is s for a terminal: control characters (an escape sequence a
// request path or a provider's name could carry) written as Go escapes.
func printable(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
