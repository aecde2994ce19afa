package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeward/nodeward/mustgather"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// What `oc adm must-gather --image=…` runs in the image, from openshift/oc
// pkg/cli/admin/mustgather/mustgather.go at commit
// 027f4a81398492ae45cf1c408e38bf5de54d7844: volumeUsageCheckerScript,
// formatted by newPod with the source directory (/must-gather), the
// --volume-percentage (30 by default) twice and the executed command
// (/usr/bin/gather when none is given); the gather container's Command is
// /bin/bash -c "<checker> & <command>; sync", the copy container's
// /bin/bash -c "trap : TERM INT; sleep infinity & wait".
const (
	ocVolumeUsageChecker = `
echo "volume percentage checker started....."
while true; do
usage_percentage=$(df -P "%s" | awk 'NR==2 {print $5}' | sed 's/%%//')
echo "volume usage percentage $usage_percentage"
if [ "$usage_percentage" -gt "%d" ]; then
	echo "Disk usage exceeds the volume percentage of %d for mounted directory. Exiting..."
	# kill gathering process in gather container to prevent disk to use more.
	pkill --signal SIGKILL -f %s
	exit 1
fi
sleep 5
done`
	ocGatherCommand = "%s & %s; sync"
	ocCopyCommand   = "trap : TERM INT; sleep infinity & wait"
)

// oc copies /must-gather/ out of the copy container with, in order:
// rsync over `oc rsh` (pkg/cli/rsync/copy_rsync.go: --blocking-io, the
// default flags of rsync.go, -v, and -z as must-gather asks to compress),
// and tar (copy_tar.go's tarRemote for a source ending in "/").
var (
	ocRsyncFlags = []string{"--blocking-io", "--archive", "--no-owner", "--no-group", "--omit-dir-times", "--numeric-ids", "-v", "-z"}
	ocTarCommand = []string{"tar", "-C", "/must-gather/", "-c", "."}
)

// TestMustGatherImageUnderOC: the image `make must-gather-image` writes,
// unpacked, runs oc adm must-gather's gather container command (chrooted
// into the image, against the real control plane through a kubeconfig in
// the root): the volume checker's df | awk | sed reads a percentage, and
// /must-gather gets index.json and the parts. The copy container's command
// keeps running, and both of oc's ways of copying /must-gather out of it,
// rsync over a remote shell and tar, bring every file of the index. With
// the volume filled past 30%, the checker stops the gathering (pkill).
func TestMustGatherImageUnderOC(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "rsync")
	t.Parallel()
	cp := env.ControlPlane(t)
	installPoolAPI(t, cp)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "mgimage", Count: 1})
	root := unpackImage(t, buildMustGatherImage(t))
	prepareContainerRoot(t, root, cp.KubeconfigPath())

	checker := fmt.Sprintf(ocVolumeUsageChecker, "/must-gather", 30, 30, "/usr/bin/gather")
	out := runGatherContainer(t, root, fmt.Sprintf(ocGatherCommand, checker, "/usr/bin/gather"))
	idx := readGatheredIndex(t, filepath.Join(root, "must-gather"), out)
	if p, ok := partOf(idx, "nodes"); !ok || !slices.Contains(p.Files, "nodes/"+nodes[0]+".json") {
		t.Errorf("nodes part %+v: no nodes/%s.json", p, nodes[0])
	}
	if p, ok := partOf(idx, "updatepools"); !ok || p.Error != "" {
		t.Errorf("updatepools part %+v", p)
	}
	if idx.LogsSince != "1h0m0s" {
		t.Errorf("logs window %q, want MUST_GATHER_SINCE's 1h0m0s", idx.LogsSince)
	}

	copyContainer := startInRoot(t, root, "/bin/bash", "-c", ocCopyCommand)
	assertListed(t, "rsync", rsyncOut(t, root), idx)
	assertListed(t, "tar", tarOut(t, root), idx)
	if err := copyContainer.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the copy container's command exited: %v", err)
	}
	assertVolumeCheckerStops(t, root, fmt.Sprintf(ocGatherCommand, checker, "/usr/bin/gather"))
}

// buildMustGatherImage writes the image as `make must-gather-image` does,
// from the static build, and returns the OCI layout tarball.
func buildMustGatherImage(t *testing.T) string {
	t.Helper()
	bin, err := cluster.NodewardBinary(cluster.StaticBuild)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "must-gather.oci.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./tools/ociimage", "-tag", "nodeward-must-gather:test", "-out", out,
		"-file", bin+":/nodeward:0755", "-symlink", "/usr/bin/gather:/nodeward", "-entrypoint", "/usr/bin/gather",
		"-userland", "tools/ociimage/must-gather.userland")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the must-gather image: %v\n%s", err, output)
	}
	return out
}

// prepareContainerRoot gives the unpacked image what the pod would: /proc
// (df reads the mount table, pkill the processes), the device nodes of
// /dev (bash's background jobs read /dev/null), the emptyDir at
// /must-gather, its own filesystem, as empty as a fresh volume, so that the
// volume checker measures it and not the host's disk, and, as in-cluster
// config is not available, a kubeconfig.
func prepareContainerRoot(t *testing.T, root, kubeconfig string) {
	t.Helper()
	for _, dir := range []string{"proc", "dev", "must-gather", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mountIn(t, root, "proc", "proc", "")
	mountIn(t, root, "must-gather", "tmpfs", "size=64m")
	for name, minor := range map[string]int{"null": 3, "zero": 5, "urandom": 9} {
		if err := syscall.Mknod(filepath.Join(root, "dev", name), syscall.S_IFCHR|0o666, 1<<8|minor); err != nil {
			t.Fatalf("/dev/%s in the image's root: %v", name, err)
		}
	}
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "kubeconfig"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// mountIn mounts a filesystem of type fstype at dir inside root until the
// test ends.
func mountIn(t *testing.T, root, dir, fstype, data string) {
	t.Helper()
	target := filepath.Join(root, dir)
	if err := syscall.Mount(fstype, target, fstype, 0, data); err != nil {
		t.Fatalf("mount %s at /%s in the image's root: %v", fstype, dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) })
}

// containerEnv is the gather container's environment: the image's PATH,
// oc's NODE_NAME, POD_NAME and MUST_GATHER_SINCE (--since=1h), KUBECONFIG.
func containerEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "KUBECONFIG=/kubeconfig",
		"NODE_NAME=mgimage-0", "POD_NAME=must-gather-test", "MUST_GATHER_SINCE=1h0m0s", "HOME=/"}
}

// startInRoot starts a command chrooted into root, in its own process
// group, its output to a file; the group is killed at cleanup, as the
// container's end would.
func startInRoot(t *testing.T, root string, argv ...string) *exec.Cmd {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := inRoot(context.Background(), t, root, argv...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v in the image: %v", argv, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		_ = log.Close()
	})
	return cmd
}

// runGatherContainer runs the gather container's command until its
// script ends (gather, then sync) and the volume checker it left in the
// background has reported a usage percentage; it returns the output.
func runGatherContainer(t *testing.T, root, script string) string {
	t.Helper()
	cmd := startInRoot(t, root, "/bin/bash", "-c", script)
	logPath := cmd.Stdout.(*os.File).Name()
	if err := waitEnd(t, cmd); err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("the gather container's command: %v\n%s", err, out)
	}
	usage := regexp.MustCompile(`volume usage percentage [0-9]+\n`)
	var out []byte
	cluster.WaitFor(t, 30*time.Second, "the volume checker reads a usage percentage", func(context.Context) (bool, error) {
		var err error
		out, err = os.ReadFile(logPath)
		return usage.Match(out), err
	})
	t.Logf("gather container output:\n%s", out)
	return string(out)
}

// waitEnd waits for cmd to end, at most 3 minutes, and returns how it
// ended. The background processes it leaves hold no pipe of ours (its
// output is a file), so it returns when cmd itself exits.
func waitEnd(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(3 * time.Minute):
		t.Fatal("the gather container's command did not end in 3 minutes")
		return nil
	}
}

// assertVolumeCheckerStops: with /must-gather filled past
// --volume-percentage, oc's checker stops the gathering with `pkill
// --signal SIGKILL -f /usr/bin/gather`, which matches the container's own
// bash -c (its command line names /usr/bin/gather) as it does in oc's pod,
// and says why first.
func assertVolumeCheckerStops(t *testing.T, root, script string) {
	t.Helper()
	fill := filepath.Join(root, "must-gather", "fill")
	if err := os.WriteFile(fill, make([]byte, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(fill)
	cmd := startInRoot(t, root, "/bin/bash", "-c", script)
	err := waitEnd(t, cmd)
	out, _ := os.ReadFile(cmd.Stdout.(*os.File).Name())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("with the volume full, the gather container's command ended with %v, want killed by pkill's SIGKILL\n%s", err, out)
	}
	if !strings.Contains(string(out), "Disk usage exceeds the volume percentage of 30") {
		t.Errorf("the volume checker did not say why it stopped the gathering:\n%s", out)
	}
}

// readGatheredIndex checks that /must-gather holds index.json and every
// file it lists.
func readGatheredIndex(t *testing.T, dir, out string) mustgather.Index {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatalf("no index.json in /must-gather: %v\n%s", err, out)
	}
	var idx mustgather.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	for _, f := range idx.Files {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path))); err != nil {
			t.Errorf("index.json lists %s: %v", f.Path, err)
		}
	}
	if len(idx.Files) < 3 {
		t.Errorf("gather wrote %d files: %+v", len(idx.Files), idx.Files)
	}
	return idx
}

// rsyncOut copies /must-gather/ as oc's rsync strategy does, the host's
// rsync talking to the image's through a remote shell that enters the
// root (oc's is `oc rsh`), and returns the copied files' paths.
func rsyncOut(t *testing.T, root string) []string {
	t.Helper()
	dir := t.TempDir()
	rsh := filepath.Join(dir, "rsh")
	script := fmt.Sprintf("#!/bin/sh\n# the pod name, as oc rsh takes it\nshift\nexec chroot %q \"$@\"\n", root)
	if err := os.WriteFile(rsh, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "out")
	args := append(append([]string{}, ocRsyncFlags...), "-e", rsh, "must-gather-test:/must-gather/", dest)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "rsync", args...).CombinedOutput(); err != nil {
		t.Fatalf("rsync %v: %v\n%s", args, err, out)
	}
	var files []string
	err := filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dest, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// tarOut runs oc's tar strategy's command in the image and returns the
// paths its archive holds.
func tarOut(t *testing.T, root string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := inRoot(ctx, t, root, ocTarCommand...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v in the image: %v\n%s", ocTarCommand, err, stderr.String())
	}
	var files []string
	tr := tar.NewReader(&stdout)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("the image's tar wrote no tar: %v", err)
		}
		if hdr.Typeflag == tar.TypeReg {
			files = append(files, strings.TrimPrefix(hdr.Name, "./"))
		}
	}
}

// assertListed: what a copy brought is index.json and every file the
// index lists.
func assertListed(t *testing.T, how string, files []string, idx mustgather.Index) {
	t.Helper()
	want := []string{"index.json"}
	for _, f := range idx.Files {
		want = append(want, f.Path)
	}
	for _, w := range want {
		if !slices.Contains(files, w) {
			t.Errorf("%s copy of /must-gather: %s missing (got %v)", how, w, files)
		}
	}
}

// inRoot is a command run in root as a runtime would: chrooted, the name
// looked up on the image's PATH, not the host's.
func inRoot(ctx context.Context, t *testing.T, root string, argv ...string) *exec.Cmd {
	t.Helper()
	path := argv[0]
	if !strings.Contains(path, "/") {
		for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
			if _, err := os.Stat(filepath.Join(root, dir, path)); err == nil {
				path = dir + "/" + path
				break
			}
		}
	}
	if !strings.Contains(path, "/") {
		t.Fatalf("%s: not in the image", path)
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Err = nil // looked up in the image, not on the host
	cmd.Dir, cmd.Env = "/", containerEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	return cmd
}

// unpackImage extracts the single layer of an OCI layout tarball into a
// fresh directory, as a runtime would: directories, files with their
// modes, symbolic links.
func unpackImage(t *testing.T, layout string) string {
	t.Helper()
	blobs := readLayout(t, layout)
	var idx, man struct {
		Manifests []struct{ Digest string } `json:"manifests"`
		Layers    []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, blobs["index.json"])
	}
	if err := json.Unmarshal(blobs[blobPath(idx.Manifests[0].Digest)], &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blobs[blobPath(man.Layers[0].Digest)]))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	extractLayer(t, tar.NewReader(zr), root)
	return root
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

func readLayout(t *testing.T, layout string) map[string][]byte {
	t.Helper()
	f, err := os.Open(layout)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return blobs
		}
		if err != nil {
			t.Fatal(err)
		}
		if blobs[hdr.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

func extractLayer(t *testing.T, tr *tar.Reader, root string) {
	t.Helper()
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("read the layer: %v", err)
		}
		name := filepath.Join(root, filepath.FromSlash(filepath.Clean("/"+hdr.Name)))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, os.FileMode(hdr.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, name)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(name, data, os.FileMode(hdr.Mode).Perm())
			}
		default:
			err = fmt.Errorf("unexpected type %c", hdr.Typeflag)
		}
		if err != nil {
			t.Fatalf("layer entry %s: %v", hdr.Name, err)
		}
	}
}
