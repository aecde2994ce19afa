package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tools are the node's own programs, built from this repository.
type Tools struct {
	// Holder is test/node/holder's binary.
	Holder string
	// PauseImage is the OCI image-layout tarball of test/pause, named
	// SandboxImage.
	PauseImage string
}

// BuildTools builds the holder and the pause image into dir, from the
// repository at root: test/pause static (CGO_ENABLED=0) and packaged by
// tools/ociimage, as `make image` packages nodeward.
func BuildTools(ctx context.Context, root, dir string) (*Tools, error) {
	t := &Tools{Holder: filepath.Join(dir, "holder"), PauseImage: filepath.Join(dir, "pause.oci.tar")}
	pause := filepath.Join(dir, "pause")
	for _, b := range []struct{ out, pkg string }{
		{t.Holder, "./test/node/holder"},
		{pause, "./test/pause"},
	} {
		if err := run(ctx, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", b.out, b.pkg); err != nil {
			return nil, fmt.Errorf("build %s: %w", b.pkg, err)
		}
	}
	if err := run(ctx, root, nil, "go", "run", "./tools/ociimage", "-tag", SandboxImage, "-out", t.PauseImage,
		"-file", pause+":/pause:0755", "-entrypoint", "/pause"); err != nil {
		return nil, fmt.Errorf("package the pause image: %w", err)
	}
	return t, nil
}

// MemhogImage names the image of test/memhog, which allocates until the
// kernel kills it (the OOM-kill test's container).
const MemhogImage = "localhost/nodeward-memhog:test"

// BuildMemhog builds test/memhog static into dir and packages it as the
// OCI image-layout tarball it returns, named MemhogImage.
func BuildMemhog(ctx context.Context, root, dir string) (string, error) {
	bin, tarball := filepath.Join(dir, "memhog"), filepath.Join(dir, "memhog.oci.tar")
	if err := run(ctx, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", bin, "./test/memhog"); err != nil {
		return "", fmt.Errorf("build ./test/memhog: %w", err)
	}
	if err := run(ctx, root, nil, "go", "run", "./tools/ociimage", "-tag", MemhogImage, "-out", tarball,
		"-file", bin+":/memhog:0755", "-entrypoint", "/memhog"); err != nil {
		return "", fmt.Errorf("package the memhog image: %w", err)
	}
	return tarball, nil
}

// BuildImage runs `make image` at root, tagging the image repo:VERSION
// (the Makefile's version), and returns the tag and the digest make prints.
func BuildImage(ctx context.Context, root, repo, out string) (tag, digest string, err error) {
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", root, "image", "IMAGE_TAG="+repo+":$(VERSION)", "IMAGE_OUT="+out)
	output, err := cmd.CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("make image: %w: %s", err, output)
	}
	for _, line := range strings.Split(string(output), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "image" && strings.HasPrefix(f[1], repo+":") {
			return f[1], f[2], nil
		}
	}
	return "", "", fmt.Errorf("make image printed no tag and digest: %s", output)
}

func run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
