package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/osupdate"
)

// hostFlags are the agent's OS edge: where rpm-ostree, the boot ID and the
// kernel command line are. The defaults are a real host's; the hidden ones
// exist so that a simulated host (the rpm-ostree double of test/rpmostree)
// can run the real agent binary. The reboot goes to logind on the system
// bus, which DBUS_SYSTEM_BUS_ADDRESS overrides.
type hostFlags struct {
	rpmOstree      string
	rpmOstreeEnv   []string
	imageTransport string
	pullSecret     string
	bootIDFile     string
	cmdlineFile    string
	pollInterval   time.Duration
	// debugWedgeFile wedges the update loop while the file exists (tests
	// of the systemd watchdog).
	debugWedgeFile string
	// postUpdatePods selects pods that must be Ready on the node before
	// the update counts as healthy (empty: none).
	postUpdatePods string
}

func (f *hostFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.rpmOstree, "rpm-ostree", "rpm-ostree", "the rpm-ostree CLI")
	fl.StringArrayVar(&f.rpmOstreeEnv, "rpm-ostree-env", nil, "extra environment for rpm-ostree, KEY=VALUE (repeatable; e.g. a proxy)")
	fl.StringVar(&f.pullSecret, "pull-secret", "",
		"host path of the registry credentials rpm-ostree pulls images with: /run/ostree/auth.json is linked to it before a rebase, as the machine-config-daemon does (e.g. "+osupdate.KubeletPullSecret+"); empty links nothing")
	fl.StringVar(&f.imageTransport, "image-transport", "signed",
		"how a pool's plain image reference is pulled: signed (ostree-image-signed), unverified-registry or unverified-image")
	fl.StringVar(&f.bootIDFile, "boot-id-file", update.KernelBootIDPath, "the kernel's boot ID file")
	fl.StringVar(&f.cmdlineFile, "cmdline-file", "/proc/cmdline", "the booted kernel command line")
	fl.StringVar(&f.postUpdatePods, "post-update-pods", "",
		"label selector of pods that must run Ready on the node after a reboot before it is uncordoned (e.g. app=cni)")
	fl.DurationVar(&f.pollInterval, "update-poll-interval", 0, "re-check interval while the update waits (0: 5s)")
	fl.StringVar(&f.debugWedgeFile, "debug-wedge-file", "", "tests only: the update loop stops turning while this file exists")
	for _, hidden := range []string{"boot-id-file", "cmdline-file", "update-poll-interval", "debug-wedge-file"} {
		_ = fl.MarkHidden(hidden)
	}
}

// transport maps --image-transport to osupdate's prefix, naming a bad value.
func (f hostFlags) transport() (string, error) {
	switch f.imageTransport {
	case "signed":
		return osupdate.TransportImageSigned, nil
	case "unverified-registry":
		return osupdate.TransportUnverifiedRegistry, nil
	case "unverified-image":
		return osupdate.TransportUnverifiedImage, nil
	}
	return "", fmt.Errorf("--image-transport %q: want signed, unverified-registry or unverified-image", f.imageTransport)
}

// validate names the first bad flag.
func (f hostFlags) validate() error {
	if _, err := f.transport(); err != nil {
		return err
	}
	if f.rpmOstree == "" {
		return fmt.Errorf("--rpm-ostree is empty")
	}
	for _, kv := range f.rpmOstreeEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(k, " \t\n") {
			return fmt.Errorf("--rpm-ostree-env %q: want KEY=VALUE", kv)
		}
	}
	if _, err := f.postUpdateSelector(); err != nil {
		return err
	}
	if f.pollInterval < 0 {
		return fmt.Errorf("--update-poll-interval %s: must not be negative", f.pollInterval)
	}
	return nil
}

func (f hostFlags) updater(stateDir, hostRoot string, log *slog.Logger) (*osupdate.Updater, error) {
	transport, err := f.transport()
	if err != nil {
		return nil, err
	}
	return osupdate.New(osupdate.Config{
		Binary: f.rpmOstree, Env: f.rpmOstreeEnv, HostRoot: hostRoot, Log: log, CmdlinePath: f.cmdlineFile,
		StatePath: filepath.Join(stateDir, "osupdate.json"),
		Policy:    osupdate.Policy{DefaultTransport: transport}, AuthFile: f.pullSecret,
	})
}

// postUpdateSelector parses --post-update-pods; nil when unset.
func (f hostFlags) postUpdateSelector() (labels.Selector, error) {
	if strings.TrimSpace(f.postUpdatePods) == "" {
		return nil, nil
	}
	sel, err := labels.Parse(f.postUpdatePods)
	if err != nil {
		return nil, fmt.Errorf("--post-update-pods %q: %w", f.postUpdatePods, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("--post-update-pods %q: selects every pod; name the pods that must be Ready", f.postUpdatePods)
	}
	return sel, nil
}
