// Package mustgather collects what a support case about nodeward needs
// into one archive: the UpdatePools, every Node's nodeward state, the
// Events, the coordinator's and agents' logs, the Leases, the nodeward
// namespace's ConfigMaps (the disruption guard among them), the MCO's
// MachineConfigNodes and pools and the Machines' hooks where those APIs
// are served, and the agent's state files on a node.
//
// It never reads a Secret, and everything it writes passes a redaction
// (redact.go): managedFields dropped, credential-named fields,
// kubeconfig-like values, PEM private keys, bearer credentials and JSON
// Web Tokens replaced. A part that fails (RBAC, an API not served) is
// named in index.json with its error and the others are still collected.
package mustgather

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Options say where nodeward runs and what to collect.
type Options struct {
	// Namespace is nodeward's namespace: its pods' logs, Leases,
	// ConfigMaps and Events.
	Namespace string
	// Since bounds the logs (the API's sinceSeconds); 0 takes all the
	// kubelet kept.
	Since time.Duration
	// HostRoot, when set, is a node's root file system whose agent state
	// and host configuration are collected ("/" on the node itself, /host
	// in a debug pod); empty collects nothing of a host.
	HostRoot string
	// StateDir is the agent's --state-dir inside HostRoot.
	StateDir string
	// HostCheck, when set, reports the host's health as `nodeward check
	// --json` does (the caller owns the probes: this package links
	// nothing of the agent); its report is written even with an error.
	HostCheck func(ctx context.Context) ([]byte, error)
	// Progress receives one line per part as it ends.
	Progress io.Writer
	// Now is the clock of the index's timestamp.
	Now func() time.Time
}

// Gatherer collects the parts through one dynamic client and the core
// API's REST client (pod logs, discovery).
type Gatherer struct {
	dyn  dynamic.Interface
	core rest.Interface
	opts Options
}

// NewForConfig returns a Gatherer on cfg's cluster.
func NewForConfig(cfg *rest.Config, opts Options) (*Gatherer, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	// JSON, not protobuf: the discovery documents are decoded here and
	// the logs are text either way.
	coreCfg := rest.CopyConfig(cfg)
	coreCfg.APIPath, coreCfg.GroupVersion = "/api", &schema.GroupVersion{Version: "v1"}
	coreCfg.AcceptContentTypes, coreCfg.ContentType = "application/json", "application/json"
	coreCfg.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	core, err := rest.RESTClientFor(coreCfg)
	if err != nil {
		return nil, fmt.Errorf("create the core API client: %w", err)
	}
	return New(dyn, core, opts), nil
}

// New returns a Gatherer; core is a REST client of the core group (its
// AbsPath reaches the discovery documents too).
func New(dyn dynamic.Interface, core rest.Interface, opts Options) *Gatherer {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StateDir == "" {
		opts.StateDir = "/var/lib/nodeward"
	}
	return &Gatherer{dyn: dyn, core: core, opts: opts}
}

// Index is index.json: every part with its files or why it has none, and
// every file with what it holds.
type Index struct {
	CollectedAt    time.Time    `json:"collectedAt"`
	Namespace      string       `json:"namespace"`
	LogsSince      string       `json:"logsSince"`
	HostRoot       string       `json:"hostRoot,omitempty"`
	Parts          []PartResult `json:"parts"`
	Files          []FileEntry  `json:"files"`
	NeverCollected []string     `json:"neverCollected"`
}

// PartResult is one part's outcome. Skipped says why a part that does not
// apply (an API not served, no host) has no files; Error is a part that
// should have been collected and was not, or not whole.
type PartResult struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Files       []string `json:"files"`
	Skipped     string   `json:"skipped,omitempty"`
	Error       string   `json:"error,omitempty"`
	Seconds     float64  `json:"seconds"`
}

// FileEntry is one file of the archive.
type FileEntry struct {
	Path        string `json:"path"`
	Part        string `json:"part"`
	Description string `json:"description"`
	Bytes       int    `json:"bytes"`
}

// neverCollected is what the index and docs/must-gather.md promise is
// never in the archive.
var neverCollected = []string{
	"Secrets: never read, not even listed",
	"service account tokens, bearer credentials, JSON Web Tokens: replaced by " + Redacted,
	"kubeconfigs: a value that reads as one is replaced whole",
	"PEM private keys: replaced by " + Redacted + " (certificates, which are public, are kept)",
	"fields named as credentials (token, password, secret, private key, client-key-data, api key, credential): values replaced",
	"metadata.managedFields",
	"a Node's images list and anything of a Node outside nodeward's and the MCO's annotations, its labels, taints, conditions and node info",
}

// Run collects every part into sink and writes index.json last. Parts
// that fail are in the index; the error is the sink's (nothing more can
// be written) or ctx's.
func (g *Gatherer) Run(ctx context.Context, sink Sink) (*Index, error) {
	idx := &Index{CollectedAt: g.opts.Now().UTC(), Namespace: g.opts.Namespace, LogsSince: sinceText(g.opts.Since),
		HostRoot: g.opts.HostRoot, NeverCollected: neverCollected}
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return idx, fmt.Errorf("must-gather interrupted before %s: %w", p.name, err)
		}
		result, err := g.runPart(ctx, p, sink, idx)
		idx.Parts = append(idx.Parts, result)
		g.progress(result)
		if err != nil {
			return idx, err
		}
	}
	sort.Slice(idx.Files, func(i, j int) bool { return idx.Files[i].Path < idx.Files[j].Path })
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return idx, fmt.Errorf("encode index.json: %w", err)
	}
	if err := sink.WriteFile("index.json", data); err != nil {
		return idx, err
	}
	return idx, nil
}

// Failed lists the parts that failed.
func (idx *Index) Failed() []string {
	var names []string
	for _, p := range idx.Parts {
		if p.Error != "" {
			names = append(names, p.Name)
		}
	}
	return names
}

func sinceText(d time.Duration) string {
	if d <= 0 {
		return "all"
	}
	return d.String()
}

// runPart runs one part; the error is only the sink's, which ends the run.
func (g *Gatherer) runPart(ctx context.Context, p part, sink Sink, idx *Index) (PartResult, error) {
	start := time.Now()
	result := PartResult{Name: p.name, Description: p.description, Files: []string{}}
	w := &partWriter{sink: sink, part: p.name, idx: idx, result: &result}
	skip, err := g.applies(ctx, p)
	switch {
	case err != nil:
		result.Error = err.Error()
	case skip != "":
		result.Skipped = skip
	default:
		if err := p.collect(ctx, g, w); err != nil {
			result.Error = err.Error()
		}
	}
	result.Seconds = time.Since(start).Seconds()
	return result, w.sinkErr
}

func (g *Gatherer) progress(r PartResult) {
	status := fmt.Sprintf("%d files", len(r.Files))
	switch {
	case r.Error != "":
		status += ", FAILED: " + r.Error
	case r.Skipped != "":
		status = "skipped: " + r.Skipped
	}
	fmt.Fprintf(g.opts.Progress, "must-gather: %-20s %s (%.1fs)\n", r.Name, status, r.Seconds)
}

// partWriter writes one part's files through the text redaction and
// records them in the index. A sink error is kept and ends the run after
// the part.
type partWriter struct {
	sink    Sink
	part    string
	idx     *Index
	result  *PartResult
	sinkErr error
}

// file writes plain text (a log, a host file) through RedactText.
func (w *partWriter) file(name, description string, data []byte) error {
	return w.write(name, description, RedactText(data))
}

func (w *partWriter) write(name, description string, data []byte) error {
	if w.sinkErr != nil {
		return w.sinkErr
	}
	if err := w.sink.WriteFile(name, data); err != nil {
		w.sinkErr = err
		return err
	}
	w.result.Files = append(w.result.Files, name)
	w.idx.Files = append(w.idx.Files, FileEntry{Path: name, Part: w.part, Description: description, Bytes: len(data)})
	return nil
}

// json writes v indented through RedactJSON; objects in it must be
// redacted already (RedactObject).
func (w *partWriter) json(name, description string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return w.write(name, description, RedactJSON(append(data, '\n')))
}
