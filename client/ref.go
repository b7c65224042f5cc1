package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/inferq/inferq/task"
)

// ErrRelativeRef is a RefError's reason when a relative result_ref meets a
// Client without Config.HTTPURL.
var ErrRelativeRef = errors.New("a relative reference needs the base URL of the replica's HTTP listener (servers make absolute ones with http.advertise_url)")

// RefError is the error of reading a result stored by reference: it says
// where the result is and why it could not be read. It wraps
// task.ErrResultByReference and Err.
type RefError struct {
	TaskID string
	// Ref is the record's result_ref; URL is what was read ("" when no
	// URL could be made of Ref).
	Ref, URL string
	// Status is the HTTP status of the answer, 0 when none came.
	Status int
	// Err is why the record could not be read.
	Err error
}

func (e *RefError) Error() string {
	return fmt.Sprintf("client: the result of task %s is stored by reference at %s and could not be read: %v", e.TaskID, cmp.Or(e.URL, e.Ref), e.Err)
}

// Unwrap returns task.ErrResultByReference and Err.
func (e *RefError) Unwrap() []error { return []error{task.ErrResultByReference, e.Err} }

// Response returns the inference response of rec, a SUCCESS record: its
// result, read first from the replica that holds it when it is stored by
// reference (FollowRef). Errors are FollowRef's and Record.Response's.
func (c *Client) Response(ctx context.Context, rec *task.Record) (*task.InferResponse, error) {
	whole, err := c.FollowRef(ctx, rec)
	if err != nil {
		return nil, err
	}
	return whole.Response()
}

// FollowRef returns rec whole: rec itself unless its result is stored by
// reference (a result over the model's result.max_result_bytes reaches the
// producer as a record with ResultRef and no Result), else the record read
// from ResultRef, the replica's /v1/tasks/{id}: a relative reference is
// joined to Config.HTTPURL, and Config.HTTPToken goes with the request as
// its bearer token (to the host the reference names). Errors are
// *RefError. Safe for concurrent use; ctx bounds the read.
func (c *Client) FollowRef(ctx context.Context, rec *task.Record) (*task.Record, error) {
	if len(rec.Result) != 0 || rec.ResultRef == "" {
		return rec, nil
	}
	e := &RefError{TaskID: rec.TaskID, Ref: rec.ResultRef}
	e.URL, e.Err = c.refURL(rec.ResultRef)
	if e.Err != nil {
		return nil, e
	}
	var whole *task.Record
	if e.Status, whole, e.Err = c.readRecord(ctx, e.URL); e.Err != nil {
		return nil, e
	}
	switch {
	case whole.TaskID != rec.TaskID:
		e.Err = fmt.Errorf("the record there is task %q's", whole.TaskID)
	case len(whole.Result) == 0 && whole.ResultRef != "":
		e.Err = errors.New("the replica answered with the reference again, not the whole record")
	}
	if e.Err != nil {
		return nil, e
	}
	return whole, nil
}

// refURL is the URL to read ref from.
func (c *Client) refURL(ref string) (string, error) {
	u, err := url.Parse(ref)
	switch {
	case err != nil:
		return "", fmt.Errorf("result_ref is not a URL: %w", errors.Unwrap(err))
	case u.IsAbs():
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", fmt.Errorf("result_ref is a %s URL; want http or https", u.Scheme)
		}
		return ref, nil
	case !strings.HasPrefix(ref, "/"):
		return "", errors.New("result_ref is neither an absolute URL nor a path")
	case c.cfg.HTTPURL == "":
		return "", ErrRelativeRef
	}
	// Joined as the server makes an absolute one: a path prefix stays.
	return strings.TrimSuffix(c.cfg.HTTPURL, "/") + ref, nil
}

// readRecord GETs the record at u: the HTTP status (0 when no answer
// came) and the record.
func (c *Client) readRecord(ctx context.Context, u string) (int, *task.Record, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	if c.cfg.HTTPToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.HTTPToken)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, fmt.Errorf("%s: %s", resp.Status, serverMessage(body))
	}
	rec, err := task.ParseRecord(body)
	return resp.StatusCode, rec, err
}

// serverMessage is the "error" of a JSON error body, else the body's
// start.
func serverMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	const most = 256
	if len(body) > most {
		return strings.ToValidUTF8(string(body[:most]), "") + "..."
	}
	return string(body)
}

// checkHTTPURL reports why u cannot be Config.HTTPURL: it must be an
// absolute http or https URL with a host, and no query or fragment.
func checkHTTPURL(u string) error {
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return fmt.Errorf("is not a URL: %w", errors.Unwrap(err))
	case p.Scheme != "http" && p.Scheme != "https":
		return errors.New("is not an absolute http:// or https:// URL")
	case p.Host == "":
		return errors.New("has no host")
	case p.RawQuery != "" || p.Fragment != "":
		return errors.New("has a query or fragment; want none")
	}
	return nil
}
