package silence

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The JSON of Alertmanager's API v2 (api/v2/openapi.yaml): only the fields
// nodeward reads or writes.

// matcher is one silence matcher. IsEqual defaults to true in the API;
// Alertmanager before 0.22 omits it, hence the pointer when decoding.
type matcher struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual *bool  `json:"isEqual,omitempty"`
}

func (m matcher) equal() bool { return m.IsEqual == nil || *m.IsEqual }

// postableSilence is the body of POST /api/v2/silences. With ID set it
// updates that silence in place when Alertmanager allows (same matchers, an
// active silence's startsAt unchanged); otherwise Alertmanager expires it
// and creates a new one with a new ID.
type postableSilence struct {
	ID        string    `json:"id,omitempty"`
	Matchers  []matcher `json:"matchers"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	CreatedBy string    `json:"createdBy"`
	Comment   string    `json:"comment"`
}

// gettableSilence is one element of GET /api/v2/silences.
type gettableSilence struct {
	ID     string `json:"id"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
	Matchers  []matcher `json:"matchers"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	CreatedBy string    `json:"createdBy"`
	Comment   string    `json:"comment"`
}

// stateExpired is the state of an ended silence (the others: active,
// pending).
const stateExpired = "expired"

// client talks to one Alertmanager.
type client struct {
	http *http.Client
	base string // without the trailing slash
}

// list returns every silence Alertmanager holds, expired ones included
// (it keeps them for --data.retention). No filter: Alertmanager's filter
// parameter selects silences by their matchers only, read as labels, so it
// cannot select by createdBy or comment, and a filter on the node label
// would miss the silences made before spec.nodeLabel changed.
func (c client) list(ctx context.Context) ([]gettableSilence, error) {
	var out []gettableSilence
	if err := c.do(ctx, http.MethodGet, c.base+"/api/v2/silences", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// post creates the silence, or updates or replaces s.ID; it returns the ID
// Alertmanager gave.
func (c client) post(ctx context.Context, s postableSilence) (string, error) {
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	if err := c.do(ctx, http.MethodPost, c.base+"/api/v2/silences", s, &out); err != nil {
		return "", err
	}
	if out.SilenceID == "" {
		return "", fmt.Errorf("POST %s/api/v2/silences: the answer has no silenceID", c.base)
	}
	return out.SilenceID, nil
}

// expire ends the silence now. Alertmanager answers 200 for one already
// expired, and 500 (not 404) for an unknown ID.
func (c client) expire(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, c.base+"/api/v2/silence/"+url.PathEscape(id), nil, nil)
}

// maxErrorBody bounds how much of an error answer goes into the error.
const maxErrorBody = 1024

// do sends one request with body as JSON and decodes a 200 answer into out.
// Any other status is an error with the method, URL, status and the start
// of the body.
func (c client) do(ctx context.Context, method, u string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, u, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err // *url.Error: it names the method and the URL
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		body := strings.TrimSpace(string(b))
		// Alertmanager's error bodies are JSON strings: give the text.
		var text string
		if json.Unmarshal(b, &text) == nil {
			body = text
		}
		return &statusError{Method: method, URL: u, Code: resp.StatusCode, Status: resp.Status, Body: body}
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, u, err)
	}
	return nil
}

// statusError is an answer other than 200.
type statusError struct {
	Method, URL string
	Code        int
	Status      string // "400 Bad Request"
	Body        string // its start
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.URL, e.Status, e.Body)
}
