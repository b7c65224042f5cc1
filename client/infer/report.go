package infer

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// printRecord prints one task's record and outputs, and fails unless it
// succeeded and its result, stored by reference or not, was read (refErr
// says why one stored by reference was not).
func (r *run) printRecord(rec *task.Record, refErr error, lat time.Duration) error {
	var resp *task.InferResponse
	if rec.Status == task.StatusSuccess {
		if refErr != nil {
			return refErr
		}
		var err error
		if resp, err = rec.Response(); err != nil {
			return fmt.Errorf("task %s: result: %w", rec.TaskID, err)
		}
	}
	if r.JSON {
		out := struct {
			TaskID    string          `json:"task_id"`
			Status    task.Status     `json:"status"`
			LatencyMS float64         `json:"latency_ms"`
			Error     string          `json:"error,omitempty"`
			Result    json.RawMessage `json:"result,omitempty"`
		}{TaskID: rec.TaskID, Status: rec.Status, LatencyMS: millis(lat), Error: rec.Error}
		if resp != nil {
			// Re-encode with every output as JSON data, binary ones included.
			for i := range resp.Outputs {
				resp.Outputs[i].Binary = false
			}
			b, _, err := resp.Encode()
			if err != nil {
				return err
			}
			out.Result = b
		}
		if err := writeJSON(r.Stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(r.Stdout, "task %s: %s in %.1f ms\n", rec.TaskID, rec.Status, millis(lat))
		if resp != nil {
			for _, o := range resp.Outputs {
				fmt.Fprintf(r.Stdout, "  %s  %s  %s  %s\n", o.Name, o.DType, tensor.FormatShape(o.Shape), tensor.FormatValues(o.Tensor, 16))
			}
		}
		if rec.Error != "" {
			fmt.Fprintf(r.Stdout, "  error: %s\n", rec.Error)
		}
	}
	if rec.Status != task.StatusSuccess {
		return fmt.Errorf("task %s: %s: %s", rec.TaskID, rec.Status, rec.Error)
	}
	return nil
}

// printSummary prints the counts, rate and latency percentiles of the
// tasks ids, and fails when one failed. refs holds the tasks whose result
// was stored by reference, with why it could not be read: such a task
// counts failed.
func (r *run) printSummary(ids []string, recs map[string]*task.Record, refs map[string]error, lat []time.Duration, elapsed time.Duration) error {
	ok, failed := 0, 0
	var firstErr string
	for _, id := range ids {
		rec, refErr := recs[id], refs[id]
		if rec.Status == task.StatusSuccess && refErr == nil {
			ok++
			continue
		}
		failed++
		switch {
		case firstErr != "":
		case refErr != nil:
			firstErr = refErr.Error()
		default:
			firstErr = fmt.Sprintf("%s: %s", rec.Status, rec.Error)
		}
	}
	slices.Sort(lat)
	rate := float64(len(ids)) / elapsed.Seconds()
	p50, p99 := millis(quantile(lat, 0.50)), millis(quantile(lat, 0.99))
	if r.JSON {
		sum := map[string]any{
			"model": r.Model, "queue": r.Queue, "count": len(ids), "ok": ok, "failed": failed,
			"seconds": elapsed.Seconds(), "tasks_per_second": rate,
			"latency_p50_ms": p50, "latency_p99_ms": p99,
		}
		if len(refs) > 0 {
			sum["by_reference"] = len(refs)
		}
		if err := writeJSON(r.Stdout, sum); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(r.Stdout, "%d tasks to %s: %d ok, %d failed in %.2fs (%.1f tasks/s)\nlatency p50 %.1f ms, p99 %.1f ms\n",
			len(ids), r.Queue, ok, failed, elapsed.Seconds(), rate, p50, p99)
		if len(refs) > 0 {
			read := 0
			for _, err := range refs {
				if err == nil {
					read++
				}
			}
			fmt.Fprintf(r.Stdout, "%d results stored by reference, %d read from their replica (latency includes the read)\n", len(refs), read)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d tasks failed; first: %s", failed, len(ids), firstErr)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// quantile returns the q-quantile of sorted (nearest rank), 0 for none:
// the rank bench.Quantile takes, so that infer and the bench report the
// same percentiles (this package builds without cgo; bench does not).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
