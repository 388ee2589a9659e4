// Command gantry is Gantry's server and command-line tool: serve the API, and
// validate, render and apply templates.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// usage is the help, without the commands this build lacks (gantry dev
// comes with -tags dev).
var usage = forBuild(usageText, server.DevBuild)

// forBuild drops the gantry dev line from text unless dev.
func forBuild(text string, dev bool) string {
	if dev {
		return text
	}
	var kept []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "gantry dev ") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

const usageText = `gantry: a self-service GPU platform

Usage:
  gantry dev                                          local cluster with simulated GPU nodes + Gantry on it
  gantry serve [--config FILE] [--listen ADDR]        serve the API
  gantry templates validate [DIR]                     check template files (default: templates)
  gantry templates render NAME [flags]                print the objects a launch would create
  gantry templates apply -f DIR [--prune] [--dry-run] load template files into the catalog
  gantry audit verify [--db DSN] [--checkpoints FILE|URL --key PUB]
                                                      check the audit log's hash chain and signed checkpoints
  gantry audit keygen --out PREFIX                    make a checkpoint signing key (PREFIX.key, PREFIX.pub)
  gantry audit ls [--actor A] [--decision allow|deny] [--before SEQ | --after SEQ] [--limit N]
                                                      the audit log from a server (platform admins)
  gantry advise replay --dir DIR [--gpu-class C] [-o FILE] [--score]  replay a GPU trace (Alibaba GenAI format) through the advice rules
  gantry login [--server URL]                         sign the CLI in (device grant in a browser)
  gantry whoami [--server URL]                        who the CLI is signed in as

Against a server (signed in with gantry login, or $GANTRY_TOKEN and $GANTRY_SERVER):
  gantry launch TEMPLATE --team T [--gpu CLASS[:N]] [--mig P] [--set k=v]... [--wait]
                                                      launch a template; --wait follows it until it runs
  gantry ls [--team T] [--status S] [-o wide|json]    list workloads
  gantry get ID [-o json]                             one workload
  gantry open ID                                      where a notebook opens in the browser (opened on a desktop)
  gantry stop|start|rm ID                             stop, start again, delete
  gantry advice [ID]                                  a workload's findings, or the teams' open advice
  gantry templates ls | show NAME                     the server's template catalog
  gantry images ls                                    the approved image catalog and who signs each image
  gantry nodes ls | get NAME                          GPU nodes: their GPUs, health and agent
  gantry users ls | deactivate ID | reactivate ID     users as the provider described them (platform admins)
  gantry top [--team T] [--watch 5s]                  live GPU use of running workloads (utilization, memory, $/h)
  gantry logs ID [-f] [--tail N]                      a workload's log (-f follows it)
  gantry events ID                                    a workload's Kubernetes events
  gantry tokens create [--team T] [--read-only] [--days N] | ls | revoke ID
                                                      personal access tokens (for notebooks, CI)
  gantry approve|deny ID --reason TEXT                decide on a launch held for approval
  gantry estimate TEMPLATE --team T [--gpu ...] [--set k=v]... [--min-memory GIB]
                                                      price a launch, and whether it would start now
  gantry cost [--by team|user|template|gpuClass|costCenter] [--since DUR]
                                                      showback: used and idle dollars
  gantry completion bash|zsh|fish                     print a shell completion script
  gantry version                                      print the version

Run "gantry COMMAND -h" for a command's flags. Exit codes: 0 done; 1 the command
failed (one line on stderr says why: the server's problem, a workload that
failed or did not start in time under --wait); 2 a usage error (a flag or an
argument). Tables on a terminal; -o json for programs.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command and returns the exit code: 0 success, 1 failure,
// 2 usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// "gantry templates -h" and the like: the group's lines of the usage.
	if groups[args[0]] && len(args) > 1 && (args[1] == "-h" || args[1] == "--help" || args[1] == "help") {
		fmt.Fprint(stdout, groupUsage(args[0]))
		return 0
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "dev":
		err = devCmd(ctx, args[1:], stdout, stderr)
	case "templates":
		if len(args) < 2 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		switch args[1] {
		case "validate":
			err = validateCmd(args[2:], stdout, stderr)
		case "render":
			err = renderCmd(args[2:], stdout, stderr)
		case "apply":
			err = applyCmd(ctx, args[2:], stdout, stderr)
		case "ls", "show":
			err = catalogCmd(ctx, args[1], args[2:], stdout, stderr)
		default:
			fmt.Fprintf(stderr, "gantry templates: unknown command %q\n\n%s", args[1], usage)
			return 2
		}
	case "audit":
		if len(args) < 2 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		switch args[1] {
		case "verify":
			err = auditVerifyCmd(ctx, args[2:], stdout, stderr)
		case "keygen":
			err = auditKeygenCmd(args[2:], stdout, stderr)
		case "ls":
			err = auditListCmd(ctx, args[2:], stdout, stderr)
		default:
			fmt.Fprintf(stderr, "gantry audit: unknown command %q\n\n%s", args[1], usage)
			return 2
		}
	case "advise":
		if len(args) < 2 || args[1] != "replay" {
			fmt.Fprint(stderr, usage)
			return 2
		}
		err = adviseReplayCmd(ctx, args[2:], stdout, stderr)
	case "login":
		err = loginCmd(ctx, args[1:], stdout, stderr)
	case "whoami":
		err = whoamiCmd(ctx, args[1:], stdout, stderr)
	case "launch":
		err = launchCmd(ctx, args[1:], stdout, stderr)
	case "ls":
		err = lsCmd(ctx, args[1:], stdout, stderr)
	case "get":
		err = getCmd(ctx, args[1:], stdout, stderr)
	case "stop", "start", "rm":
		err = changeCmd(ctx, args[0], args[1:], stdout, stderr)
	case "approve", "deny":
		err = decideCmd(ctx, args[0], args[1:], stdout, stderr)
	case "estimate":
		err = estimateCmd(ctx, args[1:], stdout, stderr)
	case "logs":
		err = logsCmd(ctx, args[1:], stdout, stderr)
	case "events":
		err = eventsCmd(ctx, args[1:], stdout, stderr)
	case "tokens":
		err = tokensCmd(ctx, args[1:], stdout, stderr)
	case "advice":
		err = adviceCmd(ctx, args[1:], stdout, stderr)
	case "completion":
		err = completionCmd(args[1:], stdout)
	case "cost":
		err = costCmd(ctx, args[1:], stdout, stderr)
	case "top":
		err = topCmd(ctx, args[1:], stdout, stderr)
	case "open":
		err = openCmd(ctx, args[1:], stdout, stderr)
	case "nodes":
		err = nodesCmd(ctx, args[1:], stdout, stderr)
	case "users":
		err = usersCmd(ctx, args[1:], stdout, stderr)
	case "images":
		err = imagesCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintf(stdout, "gantry %s (%s)\n", version, goVersion())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gantry: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return report(err, stderr)
}

// report prints err: every field problem on its own line.
func report(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var u usageError
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "gantry: %v\n", err)
		return 2
	}
	var inv *fault.Invalid
	if errors.As(err, &inv) {
		fmt.Fprintf(stderr, "gantry: %d problem(s):\n", len(inv.Fields))
		for _, f := range inv.Fields {
			fmt.Fprintf(stderr, "  %s\n", f)
		}
		return 1
	}
	fmt.Fprintf(stderr, "gantry: %v\n", err)
	return 1
}

// groups are the commands whose first argument is a subcommand.
var groups = map[string]bool{"templates": true, "audit": true, "advise": true, "tokens": true, "images": true, "nodes": true, "users": true}

// groupUsage is the lines of the usage about the command group name.
func groupUsage(name string) string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	lines := strings.Split(usage, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "gantry "+name+" ") {
			b.WriteString(l + "\n")
			// A description on the next line belongs to it.
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "      ") && !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "gantry ") {
				b.WriteString(lines[i+1] + "\n")
			}
		}
	}
	b.WriteString("\nRun \"gantry " + name + " SUBCOMMAND -h\" for its flags.\n")
	return b.String()
}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

// flags returns a flag set that reports to stderr and does not exit.
func flags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses flags, letting them come before or after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
