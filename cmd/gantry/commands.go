package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gantryhq/gantry/internal/server"
)

// command is one of gantry's commands. The one table of them (commands)
// drives dispatch, the usage, each command's -h and the shell completions.
type command struct {
	name string
	// synopsis is what follows the name: arguments and flags.
	synopsis string
	summary  string
	// remote commands talk to a server (the usage's second part).
	remote bool
	// subs are a group's subcommands ("templates validate"); a group has no
	// run of its own.
	subs []*command
	// values are what the shell completes as its argument.
	values []string
	// hidden commands run but are not offered (gantry dev in a production
	// build, which says it is not in the build).
	hidden bool
	run    func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the table, in the usage's order; set by init (its commands'
// flags read it for their -h).
var commands []*command

func init() { commands = table(server.DevBuild) }

// table is every command of this build (gantry dev comes with -tags dev).
func table(dev bool) []*command {
	verb := func(name string, fn func(context.Context, string, []string, io.Writer, io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return fn(ctx, name, args, stdout, stderr)
		}
	}
	// sub runs a group function that takes its subcommand as args[0].
	sub := func(name string, fn func(context.Context, []string, io.Writer, io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return fn(ctx, append([]string{name}, args...), stdout, stderr)
		}
	}
	local := func(fn func([]string, io.Writer, io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			return fn(args, stdout, stderr)
		}
	}
	return append([]*command{{name: "dev", summary: "local cluster with simulated GPU nodes + Gantry on it", hidden: !dev, run: devCmd}},
		&command{name: "serve", synopsis: "[--config FILE] [--listen ADDR]", summary: "serve the API",
			run: func(ctx context.Context, args []string, _, stderr io.Writer) error { return serve(ctx, args, stderr) }},
		&command{name: "templates", subs: []*command{
			{name: "validate", synopsis: "[DIR]", summary: "check template files (default: templates)", run: local(validateCmd)},
			{name: "render", synopsis: "NAME [flags]", summary: "print the objects a launch would create", run: local(renderCmd)},
			{name: "apply", synopsis: "-f DIR [--prune] [--dry-run]", summary: "load template files into the catalog", run: applyCmd},
			{name: "ls", summary: "the server's template catalog", remote: true, run: verb("ls", catalogCmd)},
			{name: "show", synopsis: "NAME", summary: "one template of the server's catalog", remote: true, run: verb("show", catalogCmd)},
		}},
		&command{name: "audit", subs: []*command{
			{name: "verify", synopsis: "[--db DSN] [--checkpoints FILE|URL --key PUB]", summary: "check the audit log's hash chain and signed checkpoints", run: auditVerifyCmd},
			{name: "keygen", synopsis: "--out PREFIX", summary: "make a checkpoint signing key (PREFIX.key, PREFIX.pub)",
				run: func(_ context.Context, args []string, stdout, stderr io.Writer) error {
					return auditKeygenCmd(args, stdout, stderr)
				}},
			{name: "ls", synopsis: "[--actor A] [--decision allow|deny] [--before SEQ | --after SEQ] [--limit N]", summary: "the audit log from a server (platform admins)", remote: true, run: auditListCmd},
		}},
		&command{name: "advise", subs: []*command{
			{name: "replay", synopsis: "--dir DIR [--gpu-class C] [-o FILE] [--score]", summary: "replay a GPU trace (Alibaba GenAI format) through the advice rules", run: adviseReplayCmd},
		}},
		&command{name: "capacity", hidden: !dev, subs: []*command{
			{name: "replay", synopsis: "--file FILE [--day 130] [--span 24h] [--compress 72] [--policy both] [--nodes 10] [-o FILE]",
				summary: "replay a trace's pods onto a local cluster with Karpenter, reactive and warmed ahead of the forecast", run: capacityReplayCmd},
		}},
		&command{name: "forecast", subs: []*command{
			{name: "replay", synopsis: "--file FILE [--format openb] [--class C] [--horizon 2h] [--step 10m] [-o FILE] [--score]", summary: "replay a cluster trace through the demand forecast", run: forecastReplayCmd},
			{name: "show", synopsis: "--class C [--horizon 2h] [--step 10m] [--share 0.9] [-o json]", summary: "a class's demand forecast from the server's launches, and what reserving saves", remote: true, run: forecastShowCmd},
		}},
		&command{name: "login", synopsis: "[--server URL]", summary: "sign the CLI in (device grant in a browser)", run: loginCmd},
		&command{name: "whoami", synopsis: "[--server URL]", summary: "who the CLI is signed in as", run: whoamiCmd},
		&command{name: "launch", synopsis: "TEMPLATE --team T [--gpu CLASS[:N]] [--mig P] [--set k=v]... [--max-delay D] [--deadline T] [--wait]", summary: "launch a template; --wait follows it until it runs", remote: true, run: launchCmd},
		&command{name: "ls", synopsis: "[--team T] [--status S] [--ended] [-o wide|json]", summary: "list workloads (--ended: the history)", remote: true, run: lsCmd},
		&command{name: "get", synopsis: "ID [-o json]", summary: "one workload", remote: true, run: getCmd},
		&command{name: "open", synopsis: "ID", summary: "where a notebook opens in the browser (opened on a desktop)", remote: true, run: openCmd},
		&command{name: "stop", synopsis: "ID", summary: "stop a workload (its volume and objects are kept)", remote: true, run: verb("stop", changeCmd)},
		&command{name: "start", synopsis: "ID", summary: "start a stopped workload again", remote: true, run: verb("start", changeCmd)},
		&command{name: "rm", synopsis: "ID", summary: "delete a workload", remote: true, run: verb("rm", changeCmd)},
		&command{name: "progress", synopsis: "ID [-o json]", summary: "how far a training run is: step, pace, ETA, metrics, early stopping", remote: true, run: progressCmd},
		&command{name: "trial", synopsis: "TEMPLATE --team T --classes A,B --steps N [--gpus 1,2] [--mig 3g.40gb] [--deadline 8h] [--wait]", summary: "short capped runs on several classes, GPU counts and MIG slices: step time, scaling, the full run's time and cost", remote: true, run: trialCmd},
		&command{name: "trials", synopsis: "[ID] [-o json]", summary: "the trials, or what one's runs measured and the cheapest choice", remote: true, run: trialsCmd},
		&command{name: "keep", synopsis: "ID", summary: "keep a training run going whatever its early-stopping rules say", remote: true, run: keepCmd},
		&command{name: "advice", synopsis: "[ID]", summary: "a workload's findings, or the teams' open advice", remote: true, run: adviceCmd},
		&command{name: "images", subs: []*command{
			{name: "ls", synopsis: "[-o json]", summary: "the approved image catalog and who signs each image", remote: true, run: sub("ls", imagesCmd)},
		}},
		&command{name: "nodes", subs: []*command{
			{name: "ls", synopsis: "[-o json]", summary: "GPU nodes: their GPUs, health and agent", remote: true, run: sub("ls", nodesCmd)},
			{name: "get", synopsis: "NAME [-o json]", summary: "one GPU node", remote: true, run: sub("get", nodesCmd)},
			{name: "groups", synopsis: "[-o json]", summary: "the node groups and what their machines are doing", remote: true, run: nodeGroupsCmd},
			{name: "set-group", synopsis: "NAME [--max N] [--price USD] [--boot DUR] [--quiet DUR] [--warm-per-day USD]", summary: "change a node group over its file (platform engineers)", remote: true, run: setNodeGroupCmd},
			{name: "clusters", synopsis: "[-o json]", summary: "the worker clusters: prices, residency, what each has free", remote: true, run: clustersCmd},
			{name: "cordon-cluster", synopsis: "NAME", summary: "a worker cluster gets no new work (platform engineers)", remote: true, run: cordonCmd(true)},
			{name: "drain-cluster", synopsis: "NAME", summary: "cordon a worker cluster and move its Jobs elsewhere (platform engineers)", remote: true, run: drainCmd},
			{name: "uncordon-cluster", synopsis: "NAME", summary: "a worker cluster as its file says again", remote: true, run: cordonCmd(false)},
			{name: "reset-group", synopsis: "NAME", summary: "a node group back to its file's values", remote: true, run: resetNodeGroupCmd},
		}},
		&command{name: "users", subs: []*command{
			{name: "ls", synopsis: "[-o json]", summary: "users as the provider described them (platform admins)", remote: true, run: sub("ls", usersCmd)},
			{name: "deactivate", synopsis: "ID", summary: "refuse a user's sign-ins, sessions and tokens", remote: true, run: sub("deactivate", usersCmd)},
			{name: "reactivate", synopsis: "ID", summary: "let a deactivated user in again", remote: true, run: sub("reactivate", usersCmd)},
		}},
		&command{name: "top", synopsis: "[--team T] [--watch 5s]", summary: "live GPU use of running workloads (utilization, memory, $/h)", remote: true, run: topCmd},
		&command{name: "logs", synopsis: "ID [-f] [--tail N]", summary: "a workload's log (-f follows it)", remote: true, run: logsCmd},
		&command{name: "events", synopsis: "ID", summary: "a workload's Kubernetes events", remote: true, run: eventsCmd},
		&command{name: "tokens", subs: []*command{
			{name: "create", synopsis: "[--team T] [--read-only] [--days N] [--name N]", summary: "a personal access token (for notebooks, CI)", remote: true, run: sub("create", tokensCmd)},
			{name: "ls", summary: "your personal access tokens", remote: true, run: sub("ls", tokensCmd)},
			{name: "revoke", synopsis: "ID", summary: "revoke one of them", remote: true, run: sub("revoke", tokensCmd)},
		}},
		&command{name: "approve", synopsis: "ID --reason TEXT", summary: "approve a launch held for approval", remote: true, run: verb("approve", decideCmd)},
		&command{name: "deny", synopsis: "ID --reason TEXT", summary: "deny a launch held for approval", remote: true, run: verb("deny", decideCmd)},
		&command{name: "estimate", synopsis: "TEMPLATE --team T [--gpu ...] [--set k=v]... [--min-memory GIB]", summary: "price a launch, and whether it would start now", remote: true, run: estimateCmd},
		&command{name: "cost", synopsis: "[--by team|user|template|gpuClass|costCenter] [--since DUR]", summary: "showback: used and idle dollars", remote: true, run: costCmd},
		&command{name: "completion", synopsis: "bash|zsh|fish", summary: "print a shell completion script", values: []string{"bash", "zsh", "fish"},
			run: func(_ context.Context, args []string, stdout, _ io.Writer) error { return completionCmd(args, stdout) }},
		&command{name: "version", summary: "print the version", run: func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintf(stdout, "gantry %s (%s)\n", version, goVersion())
			return err
		}},
	)
}

// find is the command named name among cmds (nil if none).
func find(cmds []*command, name string) *command {
	for _, c := range cmds {
		if c.name == name {
			return c
		}
	}
	return nil
}

// lookup is the command a flag set's name ("gantry nodes ls") names.
func lookup(path string) (*command, bool) {
	cmds := commands
	var c *command
	for _, name := range strings.Fields(strings.TrimPrefix(path, "gantry ")) {
		next := find(cmds, name)
		if next == nil {
			break
		}
		c, cmds = next, next.subs
	}
	return c, c != nil && c.run != nil
}

// usageColumn is where a usage line's summary starts.
const usageColumn = 54

// usageLine is "  gantry PATH SYNOPSIS   SUMMARY", the summary on a line of its
// own when the command is too long.
func usageLine(path string, c *command) string {
	left := strings.TrimSpace("gantry " + path + " " + c.synopsis)
	if len(left)+3 <= usageColumn {
		return fmt.Sprintf("  %-*s%s\n", usageColumn-2, left, c.summary)
	}
	return fmt.Sprintf("  %s\n  %*s%s\n", left, usageColumn-2, "", c.summary)
}

// leaves are the runnable commands under cmds with their paths, in order.
func leaves(prefix string, cmds []*command, fn func(path string, c *command)) {
	for _, c := range cmds {
		if c.hidden {
			continue
		}
		path := strings.TrimSpace(prefix + " " + c.name)
		if len(c.subs) > 0 {
			leaves(path, c.subs, fn)
			continue
		}
		fn(path, c)
	}
}

// usage is the whole help.
func usage() string {
	var local, remote strings.Builder
	leaves("", commands, func(path string, c *command) {
		if c.remote {
			remote.WriteString(usageLine(path, c))
		} else {
			local.WriteString(usageLine(path, c))
		}
	})
	return "gantry: a self-service GPU platform\n\nUsage:\n" + local.String() +
		"\nAgainst a server (signed in with gantry login, or $GANTRY_TOKEN and $GANTRY_SERVER):\n" + remote.String() + `
Run "gantry COMMAND -h" for a command's flags. Exit codes: 0 done; 1 the command
failed (one line on stderr says why: the server's problem, a workload that
failed or did not start in time under --wait); 2 a usage error (a flag or an
argument). Tables on a terminal; -o json for programs.
`
}

// groupUsage is the usage of the command group g.
func groupUsage(g *command) string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	leaves(g.name, g.subs, func(path string, c *command) { b.WriteString(usageLine(path, c)) })
	b.WriteString("\nRun \"gantry " + g.name + " SUBCOMMAND -h\" for its flags.\n")
	return b.String()
}

// dispatch runs the command args name.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	case "--version":
		args[0] = "version"
	}
	c := find(commands, args[0])
	if c == nil {
		fmt.Fprintf(stderr, "gantry: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	if len(c.subs) > 0 {
		if len(args) < 2 {
			fmt.Fprint(stderr, groupUsage(c))
			return 2
		}
		if args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
			fmt.Fprint(stdout, groupUsage(c))
			return 0
		}
		s := find(c.subs, args[1])
		if s == nil {
			fmt.Fprintf(stderr, "gantry %s: unknown command %q\n\n%s", c.name, args[1], groupUsage(c))
			return 2
		}
		return report(s.run(ctx, args[2:], stdout, stderr), stderr)
	}
	return report(c.run(ctx, args[1:], stdout, stderr), stderr)
}
