package mustgather

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// maxLogBytes bounds one container's log (the API's limitBytes): an agent
// logging in a loop must not make the archive too big to attach.
const maxLogBytes = 32 << 20

// logTimeout bounds one container's log: a node whose kubelet does not
// answer must not hold up the rest of the archive.
const logTimeout = time.Minute

// container is one container of a nodeward pod whose log is read.
type container struct {
	pod, name string
	// restarted: a previous instance's log exists too.
	restarted bool
}

func collectLogs(ctx context.Context, g *Gatherer, w *partWriter) error {
	items, err := g.list(ctx, pods, g.opts.Namespace, metav1.ListOptions{LabelSelector: nodewardPodSelector})
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return fmt.Errorf("no pods labelled %s in %s", nodewardPodSelector, g.opts.Namespace)
	}
	var errs []error
	for _, c := range containersOf(items) {
		if err := g.containerLog(ctx, w, c, false); err != nil {
			if w.sinkErr != nil {
				return err
			}
			errs = append(errs, err)
		}
		if c.restarted {
			// The previous instance's log is the crash's: worth trying,
			// its absence is no failure.
			_ = g.containerLog(ctx, w, c, true)
		}
	}
	return errors.Join(errs...)
}

func containersOf(pods []map[string]any) []container {
	var out []container
	for _, p := range pods {
		name, _, _ := unstructured.NestedString(p, "metadata", "name")
		restarts := map[string]bool{}
		statuses, _, _ := unstructured.NestedSlice(p, "status", "containerStatuses")
		for _, s := range statuses {
			if s, ok := s.(map[string]any); ok {
				count, _, _ := unstructured.NestedInt64(s, "restartCount")
				restarts[fmt.Sprint(s["name"])] = count > 0
			}
		}
		specs, _, _ := unstructured.NestedSlice(p, "spec", "containers")
		for _, s := range specs {
			if s, ok := s.(map[string]any); ok {
				c := fmt.Sprint(s["name"])
				out = append(out, container{pod: name, name: c, restarted: restarts[c]})
			}
		}
	}
	return out
}

// containerLog reads one container's log through the API (the kubelet
// serves it) and writes it redacted.
func (g *Gatherer) containerLog(ctx context.Context, w *partWriter, c container, previous bool) error {
	req := g.core.Get().Namespace(g.opts.Namespace).Resource("pods").Name(c.pod).SubResource("log").
		Param("container", c.name).Param("timestamps", "true").Param("limitBytes", strconv.Itoa(maxLogBytes))
	if g.opts.Since > 0 {
		req = req.Param("sinceSeconds", strconv.FormatInt(int64(g.opts.Since.Seconds()), 10))
	}
	file, what := "logs/"+safeName(c.pod)+"/"+safeName(c.name)+".log", "log of "+c.pod+"/"+c.name
	if previous {
		req = req.Param("previous", "true")
		file, what = "logs/"+safeName(c.pod)+"/"+safeName(c.name)+".previous.log", "log of the previous "+c.pod+"/"+c.name
	}
	ctx, cancel := context.WithTimeout(ctx, logTimeout)
	defer cancel()
	stream, err := req.Stream(ctx)
	if err != nil {
		return fmt.Errorf("read the %s: %w", what, err)
	}
	defer stream.Close()
	data, err := io.ReadAll(stream)
	if err != nil {
		return fmt.Errorf("read the %s: %w", what, err)
	}
	return w.file(file, what+" since "+sinceText(g.opts.Since), data)
}
