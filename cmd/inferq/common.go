package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/runtime"
	"github.com/spf13/pflag"
)

// logFlags are the logging flags every long-running command takes.
type logFlags struct {
	level  string
	format string
}

func (l *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// logger builds the slog logger the flags ask for, writing to stderr.
func (l *logFlags) logger(a *app) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", l.format)
}

// envConfig is the config the environment alone sets (envVars), for the
// commands that need no config file.
func (a *app) envConfig() models.Config {
	var c models.Config
	for _, ev := range envVars {
		for _, name := range ev.names {
			if v := a.getenv(name); v != "" {
				ev.set(&c, v)
				break
			}
		}
	}
	return c
}

// ortFlag is the --ort-lib flag.
func ortFlag(fs *pflag.FlagSet) *string {
	return fs.String("ort-lib", "", "onnxruntime shared library (file or directory); default: $INFERQ_ORT_LIB, then next to the inferq binary, then ./lib")
}

// openRuntime finds the onnxruntime library (flag, INFERQ_ORT_LIB, next to
// the executable, ./lib) and initialises it.
func (a *app) openRuntime(explicit string, log *slog.Logger) (*runtime.Env, error) {
	s := runtime.LibrarySearch{Explicit: explicit, Env: a.getenv("INFERQ_ORT_LIB")}
	if exe, err := a.exePath(); err == nil {
		s.ExeDir = filepath.Dir(exe)
	}
	if wd, err := os.Getwd(); err == nil {
		s.WorkDir = wd
	}
	path, err := runtime.LocateLibrary(s)
	if err != nil {
		return nil, err
	}
	env, err := runtime.NewEnv(path, log)
	if err != nil {
		return nil, fmt.Errorf("load onnxruntime from %s: %w", path, err)
	}
	return env, nil
}
