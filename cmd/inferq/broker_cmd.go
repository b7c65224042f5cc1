package main

import (
	"context"
	"fmt"
	"time"

	"github.com/inferq/inferq/broker"
)

func runBroker(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("broker", "broker [--listen ADDR]", `Run inferq's embedded broker: an in-process server of the KubeMQ gRPC protocol
subset that kubemq-go v1.9.0 uses (queues, queue streams, events, events store,
queries). Producers and inferq connect to it as to a KubeMQ broker.

It keeps everything in memory: messages are lost when it stops. It is single
node, not durable and NOT FOR PRODUCTION; it exists for tests, demos and
'inferq serve --embedded-broker'. It runs until SIGINT or SIGTERM.`)
	listen := fs.String("listen", "127.0.0.1:50000", "address to serve gRPC on (host:port)")
	retention := fs.Duration("retention", 24*time.Hour, "how long events store messages are kept")
	var lf logFlags
	lf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	log, err := lf.logger(a)
	if err != nil {
		return err
	}
	srv := broker.New(broker.Options{Retention: *retention, Logger: log})
	if err := srv.Start(*listen); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "embedded KubeMQ-protocol broker listening on %s (in memory, not for production); Ctrl-C stops it\n", srv.Addr())
	<-ctx.Done()
	log.Info("broker stopping")
	return srv.Close()
}
