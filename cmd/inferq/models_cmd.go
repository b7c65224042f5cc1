package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/inferq/inferq/models/examples"
)

const modelsHelp = `Work with ONNX model files.

Subcommands:
  inspect FILE         print the model's inputs and outputs: name, datatype, shape
                       (-1 marks a dynamic dim, usually the batch dim)
  example DIR          write the example models (mlp, multitype) into DIR;
                       --heavy adds resnet18 (~47 MB, ResNet-18 with random weights)`

func runModels(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("models", "models inspect FILE | models example DIR [--heavy]", modelsHelp)
	ortLib := ortFlag(fs)
	heavy := fs.Bool("heavy", false, "example: also write resnet18.onnx (~47 MB)")
	if err := parse(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) != 2 {
		return usageErrorf("want 'models inspect FILE' or 'models example DIR'")
	}
	switch rest[0] {
	case "inspect":
		return a.inspectModel(*ortLib, rest[1])
	case "example":
		paths, err := examples.Write(rest[1], *heavy)
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintln(a.stdout, p)
		}
		return nil
	}
	return usageErrorf("unknown models subcommand %q: want inspect or example", rest[0])
}

func (a *app) inspectModel(ortLib, path string) error {
	env, err := a.openRuntime(ortLib, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer env.Close()
	info, err := env.Inspect(path)
	if err != nil {
		return err
	}
	return info.WriteTable(a.stdout)
}
