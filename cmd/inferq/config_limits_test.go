package main

import (
	"testing"

	"github.com/inferq/inferq/models"
)

// serve's broker connection can send again whatever a model accepts: its
// send limit is not mq's 16 MiB default under a model's 64 MiB
// max_body_bytes (a resend or dead letter copy of a 17 MiB task was
// refused, and the task looped).
func TestServeSendLimitCoversModelLimits(t *testing.T) {
	c := &models.Config{Models: []models.Model{models.NewModel("a")}}
	c.HTTP.Listen = "127.0.0.1:0"
	conn := serveFlags{}.workerConfig(c, nil, nil, nil, nil, nil).Broker
	if body := c.Models[0].Limits.MaxBodyBytes; conn.MaxMessageBytes <= body {
		t.Errorf("send limit %d, want more than limits.max_body_bytes %d", conn.MaxMessageBytes, body)
	}
	conn.Address = "127.0.0.1:1"
	if err := conn.Validate(); err != nil {
		t.Errorf("the broker connection serve builds is invalid: %v", err)
	}
}
