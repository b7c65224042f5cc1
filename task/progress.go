package task

import (
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

// ParseProgress reads a progress event body. pct may be any number (it is
// rounded); a missing detail is empty. Errors wrap ErrMalformed.
func ParseProgress(body []byte) (Progress, error) {
	var p Progress
	start := skipWS(body, 0)
	if start >= len(body) || body[start] != '{' {
		return p, fmt.Errorf("%w: progress: want a JSON object", ErrMalformed)
	}
	end, err := eachMember(body, start, func(key []byte, v int) (int, error) {
		switch string(key) {
		case "task_id":
			return strField(body, v, &p.TaskID, "task_id")
		case "detail":
			return strField(body, v, &p.Detail, "detail")
		case "pct":
			f, end, err := parseFloat(body, v)
			if err != nil || !(math.Abs(f) <= math.MaxInt32) {
				return end, fmt.Errorf("pct: want a number")
			}
			p.Pct = int(math.Round(f))
			return end, nil
		}
		return skipValue(body, v, 1)
	})
	if err == nil && skipWS(body, end) != len(body) {
		err = synErr(end, "data after the JSON object")
	}
	if err != nil {
		return Progress{}, fmt.Errorf("%w: progress: %v", ErrMalformed, err)
	}
	return p, nil
}
