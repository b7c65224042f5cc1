// Command inferq turns a GPU node into a queue-driven ONNX inference worker
// fed by KubeMQ. Run `inferq help` for its subcommands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// app carries what a subcommand may touch of the process: its output
// streams and its environment. Tests build one with buffers and a map.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	exePath        func() (string, error)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, a *app, args []string) error
}

func commands() []command {
	return []command{
		{"bench", "measure throughput and latency per model and device, next to the direct and broker ceilings", runBench},
		{"broker", "run the embedded in-memory KubeMQ-protocol broker (tests, demos; not for production)", runBroker},
		{"devices", "list the GPUs NVML reports, or say why there are none", runDevices},
		{"infer", "send inference tasks to a model's queue and wait for the results", runInfer},
		{"models", "inspect ONNX models and write the example models", runModels},
		{"serve", "serve the configured models from KubeMQ queues (the main job)", runServe},
		{"scaler", "KEDA external scaler on KubeMQ queue depth: scale inferq from zero", runScaler},
		{"version", "print inferq's and onnxruntime's versions", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &app{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, exePath: os.Executable}
	os.Exit(a.main(ctx, os.Args[1:]))
}

// errUsage marks an error that is the user's call to fix: it is printed
// with a pointer to --help and exits 2.
var errUsage = errors.New("usage")

// usageErrorf returns an error wrapping errUsage.
func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// main runs one subcommand and returns the process exit code.
func (a *app) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		a.usage(a.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help":
		if len(args) > 1 {
			return a.main(ctx, []string{args[1], "--help"})
		}
		a.usage(a.stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, a, args[1:])
		switch {
		case err == nil, errors.Is(err, pflag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(a.stderr, "inferq %s: %s\nRun 'inferq %s --help' for usage.\n", name, strings.TrimPrefix(err.Error(), "usage: "), name)
			return 2
		default:
			fmt.Fprintf(a.stderr, "inferq %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(a.stderr, "inferq: unknown command %q\n\n", name)
	a.usage(a.stderr)
	return 2
}

func (a *app) usage(w io.Writer) {
	fmt.Fprint(w, `inferq serves ONNX models from KubeMQ queues on GPU nodes.

Usage:
  inferq <command> [flags]

Commands:
`)
	cmds := commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'inferq <command> --help' for a command's flags.
`)
}

// newFlags returns a flag set whose --help prints the command's synopsis,
// description and flags to stdout.
func (a *app) newFlags(name, synopsis, description string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		w := a.stdout
		fmt.Fprintf(w, "Usage:\n  inferq %s\n\n%s\n", synopsis, strings.TrimSpace(description))
		if fs.HasFlags() {
			fmt.Fprintf(w, "\nFlags:\n%s", fs.FlagUsages())
		}
	}
	return fs
}

// parse parses args, turning flag errors into usage errors.
func parse(fs *pflag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err // pflag has printed fs.Usage
		}
		return usageErrorf("%v", err)
	}
	return nil
}
