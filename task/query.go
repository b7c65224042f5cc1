package task

import "fmt"

// ParseQuery reads a sync query request, {"task_name","args","kwargs"} or
// its binary form, with the rules of Parse except that no task_id is
// needed (ID is the body's task_id, else the task_id tag, else empty).
// Read its tensors with Task.Inputs.
func ParseQuery(body []byte, tags map[string]string, lim Limits) (*Task, error) {
	return parse(body, tags, lim, false)
}

// QueryResponse is the body of a sync query's response:
// {"status":"SUCCESS"|"FAILURE","result","error"}. Both result and error
// are always written (null when empty), so Python clients can index them.
type QueryResponse struct {
	Status Status
	// Result is raw JSON (an InferResponse for inference); nil is null.
	Result []byte
	Error  string
	// Binary is the raw data of the result's binary outputs, written
	// after the JSON as in a Record.
	Binary []byte
}

// AppendJSON appends the response's JSON (without Binary) to b.
func (q *QueryResponse) AppendJSON(b []byte) []byte {
	b = append(b, `{"status":`...)
	b = appendString(b, string(q.Status))
	b = append(b, `,"result":`...)
	if len(q.Result) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, q.Result...)
	}
	b = append(b, `,"error":`...)
	if q.Error == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, q.Error)
	}
	return append(b, '}')
}

// Encode returns the response body (JSON, then Binary) and its tags
// (content-type, and inference-header-content-length with binary data).
func (q *QueryResponse) Encode() (body []byte, tags map[string]string) {
	body = q.AppendJSON(make([]byte, 0, 64+len(q.Result)+len(q.Error)+len(q.Binary)))
	tags = map[string]string{}
	return withBinary(body, q.Binary, tags), tags
}

// ParseQueryResponse reads a query response body: its members (status,
// result, error) are a record's, so the record's reader reads it. Result
// and Binary alias body. Errors wrap ErrMalformed.
func ParseQueryResponse(body []byte) (*QueryResponse, error) {
	var r Record
	end, err := readRecord(body, &r)
	if err != nil {
		return nil, fmt.Errorf("%w: query response: %v", ErrMalformed, err)
	}
	if r.Status == "" {
		return nil, fmt.Errorf("%w: query response: no status", ErrMalformed)
	}
	q := &QueryResponse{Status: r.Status, Result: r.Result, Error: r.Error}
	if skipWS(body, end) < len(body) {
		q.Binary = body[end:]
	}
	return q, nil
}

// Response decodes the result as an InferResponse (see Record.Response).
func (q *QueryResponse) Response() (*InferResponse, error) {
	return DecodeInferResponse(q.Result, q.Binary)
}
