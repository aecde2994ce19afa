// Package rpmostree is a test double of the rpm-ostree CLI: the subset
// nodeward calls, state in a directory named by $RPMOSTREE_DOUBLE_DIR,
// `status --json` in the real schema, a "boot" the harness triggers, and
// injectable failures. The binary is ./cmd/rpm-ostree; Double builds and
// drives it.
package rpmostree

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// EnvDir names the environment variable holding the double's state dir.
const EnvDir = "RPMOSTREE_DOUBLE_DIR"

// Image is what the fake registry serves for an image reference (without
// transport).
type Image struct {
	Checksum string `json:"checksum"`
	Digest   string `json:"digest"`
	Version  string `json:"version"`
}

// Deployment is one bootable tree.
type Deployment struct {
	Checksum string   `json:"checksum"`
	ImageRef string   `json:"imageRef,omitempty"` // with transport
	Digest   string   `json:"digest,omitempty"`
	Version  string   `json:"version,omitempty"`
	Kargs    []string `json:"kargs"`
	Serial   int      `json:"serial"`
}

// Failure makes a verb fail. Times counts the calls that fail; 0 means
// every call.
type Failure struct {
	// Mode: "timeout" (hang until killed), "exit" (exit 1 with Stderr),
	// "garbage" (exit 0, unparseable output), "busy" (report a running
	// transaction; mutating verbs fail with "Transaction in progress").
	Mode   string `json:"mode"`
	Stderr string `json:"stderr,omitempty"`
	Times  int    `json:"times,omitempty"`
}

// State is the whole double, in state.json.
type State struct {
	OSName string `json:"osname"`
	// Deployments in bootloader order, excluding the staged one.
	Deployments []Deployment `json:"deployments"`
	Booted      int          `json:"booted"` // index into Deployments
	Staged      *Deployment  `json:"staged,omitempty"`
	Locked      bool         `json:"locked"` // finalization lock of Staged
	// RebootRequested is set by finalize-deployment (which reboots).
	RebootRequested bool               `json:"rebootRequested"`
	Images          map[string]Image   `json:"images"`
	Failures        map[string]Failure `json:"failures,omitempty"`
	// FailFinalize makes the next boot's ostree-finalize-staged fail.
	FailFinalize bool `json:"failFinalize,omitempty"`
	// BootWrong makes the next boot pick the second entry instead of the
	// default (a firmware or bootloader mishap).
	BootWrong bool `json:"bootWrong,omitempty"`
	// PullDelay is how long rebase and deploy take to pull a new image (a
	// simulated download); the transaction holds the double meanwhile.
	PullDelay time.Duration `json:"pullDelay,omitempty"`
	// FinalizeDelay is how long finalize-deployment takes (a slow
	// /boot); the transaction holds the double meanwhile.
	FinalizeDelay time.Duration `json:"finalizeDelay,omitempty"`
	// KernelBootIDPath, when set, makes the double follow the boots of a
	// real kernel (a machine or a container that really reboots) instead
	// of Boot calls: the first invocation in a boot whose ID, read from
	// this file (/proc/sys/kernel/random/boot_id), differs from
	// KernelBootID first does what that boot did to the host —
	// ostree-finalize-staged at the shutdown before it, then the
	// bootloader, as Boot does — and records the new ID. Several boots
	// without an invocation in between count as one.
	KernelBootIDPath string `json:"kernelBootIDPath,omitempty"`
	// KernelBootID is the boot the double last saw; empty until the first
	// invocation, whose boot is the one the host was created in.
	KernelBootID string `json:"kernelBootID,omitempty"`
	// Calls logs every invocation (argv), for assertions.
	Calls [][]string `json:"calls"`
	Boots int        `json:"boots"`
}

// CallCount counts the invocations of verb, or of any of verbs.
func (s *State) CallCount(verb string, verbs ...string) int {
	n := 0
	for _, c := range s.Calls {
		if len(c) > 0 && (c[0] == verb || slices.Contains(verbs, c[0])) {
			n++
		}
	}
	return n
}

// followKernel boots the double when the kernel booted since its last
// invocation (see KernelBootIDPath).
func (s *State) followKernel(dir string) error {
	if s.KernelBootIDPath == "" {
		return nil
	}
	data, err := os.ReadFile(s.KernelBootIDPath)
	if err != nil {
		return fmt.Errorf("reading the kernel's boot ID: %w", err)
	}
	id := strings.TrimSpace(string(data))
	switch s.KernelBootID {
	case id:
		return nil
	case "":
		s.KernelBootID = id
		return nil
	}
	journal, err := s.boot()
	if err != nil {
		return err
	}
	s.KernelBootID = id
	return writeBootFiles(dir, s, journal)
}

// Load reads dir/state.json.
func Load(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("reading double state: %w", err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decoding double state: %w", err)
	}
	if s.Images == nil {
		s.Images = map[string]Image{}
	}
	return &s, nil
}

// Save writes dir/state.json atomically and the booted command line to
// dir/cmdline.
func (s *State) Save(dir string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".state.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

// BootedDeployment returns the booted one.
func (s *State) BootedDeployment() (*Deployment, error) {
	if s.Booted < 0 || s.Booted >= len(s.Deployments) {
		return nil, errors.New("double state: booted index out of range")
	}
	return &s.Deployments[s.Booted], nil
}
