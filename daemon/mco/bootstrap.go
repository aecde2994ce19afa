package mco

// A new node: its first annotations come from the file the machine config
// server laid down at first boot.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The machine config server's first-boot files, as seen on the host.
const (
	// NodeAnnotationsFile holds the annotations a new node starts with
	// (currentConfig, desiredConfig, …), written at first boot.
	NodeAnnotationsFile = "/etc/machine-config-daemon/node-annotations.json"
	// NodeAnnotationsDoneFile is where the file goes once the node runs
	// its first config: the daemon keeps it there for debugging.
	NodeAnnotationsDoneFile = "/etc/machine-config-daemon/node-annotation.json.bak"

	// AnnotationFirstPivotConfig is the config the node first booted into.
	AnnotationFirstPivotConfig = "machineconfiguration.openshift.io/firstPivotConfig"

	annotationPrefix = "machineconfiguration.openshift.io/"
)

// Bootstrap is a new node's first-boot file under a host root. While the
// file is there the node is bootstrapping: it takes its first config from
// the file and moves to it without waiting for the node controller, as the
// daemon's first-boot pivot does; once it runs that config the file is
// renamed away (Finish).
type Bootstrap struct {
	// Root is the host's root filesystem ("/" on a host).
	Root string
}

// Active tells whether the node is bootstrapping (the file is there).
func (b Bootstrap) Active() (bool, error) {
	return exists(b.path(NodeAnnotationsFile))
}

// Annotations reads the file: the node's first annotations, all of the
// machine config operator's, with a currentConfig. The state annotation is
// left out: the agent reports its own. A file that is missing or
// malformed is an error that names it and what is wrong.
func (b Bootstrap) Annotations() (map[string]string, error) {
	data, err := os.ReadFile(b.path(NodeAnnotationsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the node has no %s annotation and no %s to take its first config from", AnnotationCurrentConfig, NodeAnnotationsFile)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read initial annotations from %q: %w", NodeAnnotationsFile, err)
	}
	var initial map[string]string
	if err := json.Unmarshal(data, &initial); err != nil {
		return nil, fmt.Errorf("failed to unmarshal initial annotations from %q: %w", NodeAnnotationsFile, err)
	}
	if initial[AnnotationCurrentConfig] == "" {
		return nil, fmt.Errorf("initial annotations in %q: no %s", NodeAnnotationsFile, AnnotationCurrentConfig)
	}
	keys := make([]string, 0, len(initial))
	for k := range initial {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !strings.HasPrefix(k, annotationPrefix) {
			return nil, fmt.Errorf("initial annotations in %q: %q is not a machine config annotation (%s…)", NodeAnnotationsFile, k, annotationPrefix)
		}
	}
	delete(initial, AnnotationState)
	delete(initial, AnnotationReason)
	return initial, nil
}

// Finish renames the file away once the node runs its first config; a
// node that finished already has nothing to do.
func (b Bootstrap) Finish() error {
	err := os.Rename(b.path(NodeAnnotationsFile), b.path(NodeAnnotationsDoneFile))
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("renaming initial node annotation file: %w", err)
}

func (b Bootstrap) path(p string) string {
	return filepath.Join(b.Root, p)
}
