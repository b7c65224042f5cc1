package main

import (
	"context"
	"fmt"
	"log/slog"
	goruntime "runtime"
)

func runVersion(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("version", "version [--ort-lib PATH]",
		"Print inferq's version and, when the onnxruntime library is found, its version and path.")
	ortLib := ortFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "inferq %s (%s, %s/%s)\n", version, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
	env, err := a.openRuntime(*ortLib, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(a.stdout, "onnxruntime: %v\n", err)
		return nil
	}
	defer env.Close()
	fmt.Fprintf(a.stdout, "onnxruntime %s (%s)\n", env.Version(), env.LibraryPath())
	return nil
}
