package task

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Progress is a progress event, sent as a KubeMQ Event on "<queue>.progress":
// body {"task_id","pct","detail"}, tags task_id and pct (an integer string).
type Progress struct {
	TaskID string
	// Pct is the percentage done, 0 to 100 (not clamped).
	Pct int
	// Detail says what happened: received, running (batch size), stored,
	// retrying, failed.
	Detail string
}

// Encode returns the event body and tags.
func (p Progress) Encode() (body []byte, tags map[string]string) {
	body = append(make([]byte, 0, 64+len(p.TaskID)+len(p.Detail)), `{"task_id":`...)
	body = appendString(body, p.TaskID)
	body = appendIntField(body, "pct", int64(p.Pct))
	body = appendStringField(body, "detail", p.Detail)
	body = append(body, '}')
	return body, map[string]string{TagTaskID: p.TaskID, TagPct: strconv.Itoa(p.Pct)}
}

// ParseProgress reads a progress event body with encoding/json. pct may
// be any number (it is rounded); a missing detail is empty. Errors wrap
// ErrMalformed.
func ParseProgress(body []byte) (Progress, error) {
	var w struct {
		TaskID string   `json:"task_id"`
		Pct    *float64 `json:"pct"`
		Detail string   `json:"detail"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return Progress{}, fmt.Errorf("%w: progress: %v", ErrMalformed, jsonError(err))
	}
	p := Progress{TaskID: w.TaskID, Detail: w.Detail}
	if w.Pct != nil {
		if !(math.Abs(*w.Pct) <= math.MaxInt32) {
			return Progress{}, fmt.Errorf("%w: progress: pct: want a number", ErrMalformed)
		}
		p.Pct = int(math.Round(*w.Pct))
	}
	return p, nil
}
