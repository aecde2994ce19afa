package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Recorder writes core/v1 Events about objects, in the background: Event
// never blocks the caller. It keeps the rules of client-go's event
// broadcaster (k8s.io/client-go/tools/record) that bound what an agent or
// the coordinator writes:
//
//   - an Event identical to one already written (same object, type,
//     reason, message and source) raises that Event's count and last
//     timestamp (one merge patch) instead of making a new one;
//   - each object gets a token bucket of RecorderBurst Events of each type
//     (Normal, Warning), refilled at one every RecorderRefill: a flapping
//     object cannot flood the API server (the spam filter, keyed as
//     record's is);
//   - a full queue drops the Event (logged), it never blocks the caller.
//
// Not kept: record's aggregation of "similar" Events (same reason,
// different messages) into one "(combined from similar events)" Event.
//
// Why not record itself: it links k8s.io/apimachinery's strategic merge
// patch, and through it kube-openapi and gnostic's protobuf descriptors,
// whose package initializers leave about 250 KB of live heap in every
// process (a program importing record and nothing else: 583 KB live after
// a GC, against 327 KB for client-go's informer cache alone), and the
// agent's idle RSS is measured against node_exporter's (docs/benchmarks.md).
type Recorder struct {
	client *Client
	source corev1.EventSource
	log    *slog.Logger
	now    func() time.Time
	queue  chan *corev1.Event
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	written map[eventKey]*corev1.Event // identical Events already written
	buckets map[spamKey]*bucket
}

// spamKey is what the spam filter counts Events by.
type spamKey struct {
	object    corev1.ObjectReference
	eventType string
}

// The spam filter's budget per object, as client-go's defaults: a burst
// of 25 Events, then one every five minutes.
const (
	RecorderBurst  = 25
	RecorderRefill = 5 * time.Minute
	// recorderQueue is how many Events wait to be written before new ones
	// are dropped; recorderKeep bounds the identical-Event memory.
	recorderQueue = 1000
	recorderKeep  = 4096
	// RecorderFlushTimeout is how long a stopping process gives Shutdown
	// to write the Events still queued.
	RecorderFlushTimeout = 5 * time.Second
)

// eventKey identifies identical Events of one source.
type eventKey struct {
	object                corev1.ObjectReference
	kind, reason, message string
}

type bucket struct {
	tokens float64
	last   time.Time
}

// RecorderOptions configures NewRecorder; the zero value is ready.
type RecorderOptions struct {
	// Log receives dropped and failed Events; nil discards them.
	Log *slog.Logger
	// Now is the clock of the spam filter and the timestamps; nil is
	// time.Now.
	Now func() time.Time
}

// NewRecorder starts a recorder of Events from source. ctx bounds every
// write; Shutdown stops it.
func (c *Client) NewRecorder(ctx context.Context, source corev1.EventSource, opts RecorderOptions) *Recorder {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Recorder{
		client: c, source: source, log: opts.Log, now: opts.Now,
		queue: make(chan *corev1.Event, recorderQueue), done: make(chan struct{}),
		ctx: ctx, cancel: cancel,
		written: map[eventKey]*corev1.Event{}, buckets: map[spamKey]*bucket{},
	}
	go r.run()
	return r
}

// Eventf records an Event with a formatted message.
func (r *Recorder) Eventf(object *corev1.ObjectReference, eventType, reason, format string, args ...any) {
	r.Event(object, eventType, reason, fmt.Sprintf(format, args...))
}

// Event records an Event about object: eventType is corev1.EventTypeNormal
// or EventTypeWarning. It returns at once; the write happens in the
// background.
func (r *Recorder) Event(object *corev1.ObjectReference, eventType, reason, message string) {
	if object == nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if !r.allow(spamKey{object: *object, eventType: eventType}, now) {
		r.log.Debug("event dropped by the spam filter", "object", object.Name, "reason", reason)
		return
	}
	namespace := object.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// As client-go names them: unique per object and moment.
			Name:      fmt.Sprintf("%v.%x", object.Name, now.UnixNano()),
			Namespace: namespace,
		},
		InvolvedObject:      *object,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      metav1.NewTime(now),
		LastTimestamp:       metav1.NewTime(now),
		Count:               1,
		Type:                eventType,
		Source:              r.source,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	}
	select {
	case r.queue <- event:
	default:
		r.log.Warn("event dropped: the write queue is full", "object", object.Name, "reason", reason, "queue", recorderQueue)
	}
}

// allow takes a token of key's bucket. Called with r.mu held.
func (r *Recorder) allow(key spamKey, now time.Time) bool {
	b, ok := r.buckets[key]
	if !ok {
		if len(r.buckets) >= recorderKeep {
			clear(r.buckets)
		}
		b = &bucket{tokens: RecorderBurst, last: now}
		r.buckets[key] = b
	}
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(RecorderBurst, b.tokens+float64(elapsed)/float64(RecorderRefill))
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Shutdown stops taking Events, writes those already queued (bounded by
// timeout) and returns when the writer has stopped.
func (r *Recorder) Shutdown(timeout time.Duration) {
	r.mu.Lock()
	if !r.stopped {
		r.stopped = true
		close(r.queue)
	}
	r.mu.Unlock()
	timer := time.AfterFunc(timeout, r.cancel)
	defer timer.Stop()
	<-r.done
	r.cancel()
}

func (r *Recorder) run() {
	defer close(r.done)
	for event := range r.queue {
		if r.ctx.Err() != nil {
			continue // shutting down past its deadline: drain the queue unwritten
		}
		if err := r.write(event); err != nil {
			r.log.Warn("event not written", "object", event.InvolvedObject.Name, "reason", event.Reason, "err", err)
		}
	}
}

// write creates event, or counts it on the identical Event written
// before. A transport error is retried a few times; an answer of the API
// server is not (as client-go's broadcaster does).
func (r *Recorder) write(event *corev1.Event) error {
	key := eventKey{object: event.InvolvedObject, kind: event.Type, reason: event.Reason, message: event.Message}
	var err error
	for attempt, delay := 0, time.Second; attempt < 4; attempt, delay = attempt+1, delay*2 {
		if attempt > 0 {
			select {
			case <-r.ctx.Done():
				return err
			case <-time.After(delay):
			}
		}
		if err = r.writeOnce(key, event); err == nil {
			return nil
		}
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return err
		}
	}
	return err
}

func (r *Recorder) writeOnce(key eventKey, event *corev1.Event) error {
	r.mu.Lock()
	previous := r.written[key]
	r.mu.Unlock()
	events := r.client.Events(event.Namespace)
	if previous != nil {
		count := previous.Count + 1
		patch, err := json.Marshal(map[string]any{"count": count, "lastTimestamp": event.LastTimestamp})
		if err != nil {
			return fmt.Errorf("encode the event's count: %w", err)
		}
		counted, err := events.Patch(r.ctx, previous.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			r.remember(key, counted)
			return nil
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("count event %s/%s: %w", previous.Namespace, previous.Name, err)
		}
		// The Event expired (the API server keeps them an hour): a new one.
	}
	created, err := events.Create(r.ctx, event, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create event %s about %s %s: %w", event.Reason, event.InvolvedObject.Kind, event.InvolvedObject.Name, err)
	}
	r.remember(key, created)
	return nil
}

func (r *Recorder) remember(key eventKey, event *corev1.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.written[key]; !ok && len(r.written) >= recorderKeep {
		clear(r.written)
	}
	r.written[key] = event
}
