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
	"syscall"

	"github.com/gantryhq/gantry/internal/fault"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
		fmt.Fprint(stderr, usage())
		return 2
	}
	return dispatch(ctx, args, stdout, stderr)
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

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

// flags returns a flag set that reports to stderr and does not exit; its
// -h says the command's synopsis and summary from the table, then its flags.
func flags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if c, ok := lookup(name); ok {
		fs.Usage = func() {
			fmt.Fprintf(stderr, "Usage:\n  %s %s\n\n%s\n", name, c.synopsis, c.summary)
			var any bool
			fs.VisitAll(func(*flag.Flag) { any = true })
			if any {
				fmt.Fprintf(stderr, "\nFlags:\n")
				fs.PrintDefaults()
			}
		}
	}
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
