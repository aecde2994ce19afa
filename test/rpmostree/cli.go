package rpmostree

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ExitHang tells the binary to hang (an injected timeout).
const ExitHang = -100

type result struct {
	out, err []byte
	code     int
}

func fail(format string, args ...any) result {
	return result{err: fmt.Appendf(nil, "error: "+format+"\n", args...), code: 1}
}

func ok(format string, args ...any) result {
	return result{out: fmt.Appendf(nil, format, args...)}
}

// Run executes one invocation against the state in dir and returns stdout,
// stderr and the exit code (ExitHang to hang).
func Run(dir string, args []string) (stdout, stderr []byte, code int) {
	s, err := Load(dir)
	if err != nil {
		return nil, fmt.Appendf(nil, "error: %v\n", err), 1
	}
	if err := s.followKernel(dir); err != nil {
		return nil, fmt.Appendf(nil, "error: %v\n", err), 1
	}
	s.Calls = append(s.Calls, args)
	r := s.dispatch(args)
	if err := s.Save(dir); err != nil {
		return nil, fmt.Appendf(nil, "error: saving state: %v\n", err), 1
	}
	return r.out, r.err, r.code
}

// takeFailure consumes an injected failure for verb ("*" matches all).
func (s *State) takeFailure(verb string) (Failure, bool) {
	for _, key := range []string{verb, "*"} {
		f, found := s.Failures[key]
		if !found {
			continue
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				delete(s.Failures, key)
			} else {
				s.Failures[key] = f
			}
		}
		return f, true
	}
	return Failure{}, false
}

func (s *State) dispatch(args []string) result {
	if len(args) == 0 {
		return fail("no command given")
	}
	verb, rest := args[0], args[1:]
	var flags []string
	var pos []string
	for _, a := range rest {
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
		} else {
			pos = append(pos, a)
		}
	}
	if f, found := s.takeFailure(verb); found {
		switch f.Mode {
		case "timeout":
			return result{code: ExitHang}
		case "exit":
			return result{err: []byte(f.Stderr + "\n"), code: 1}
		case "garbage":
			return ok("\x00{not json at all \"deployments\": [\n")
		case "busy":
			if verb == "status" {
				break
			}
			return fail("Transaction in progress: rebase\n You can cancel the current transaction with `rpm-ostree cancel`")
		}
		if f.Mode == "busy" && verb == "status" {
			out, err := s.StatusJSON([]string{"rebase", "client(id:other-agent)"})
			if err != nil {
				return fail("%v", err)
			}
			return result{out: out}
		}
	}
	locked := slices.Contains(flags, "--lock-finalization")
	switch verb {
	case "status":
		if !slices.Contains(flags, "--json") {
			return fail("the double only implements status --json")
		}
		out, err := s.StatusJSON(nil)
		if err != nil {
			return fail("%v", err)
		}
		return result{out: out}
	case "rebase":
		if len(pos) != 1 {
			return fail("rebase: want exactly one REFSPEC")
		}
		return s.rebase(pos[0], locked)
	case "deploy":
		if len(pos) != 1 {
			return fail("deploy: want exactly one REVISION")
		}
		return s.deploy(pos[0], locked)
	case "kargs":
		return s.kargs(flags, locked)
	case "finalize-deployment":
		return s.finalize(pos, flags)
	case "rollback":
		return s.rollback()
	case "cleanup":
		if slices.Contains(flags, "-p") {
			s.Staged, s.Locked = nil, false
		}
		if slices.Contains(flags, "-r") {
			return fail("the double refuses cleanup -r: nodeward must never delete the rollback deployment")
		}
		return ok("Deployments unchanged.\n")
	}
	return fail("Unknown command '%s'", verb)
}

func (s *State) newSerial(checksum string) int {
	n := 0
	for _, d := range s.Deployments {
		if d.Checksum == checksum {
			n++
		}
	}
	return n
}

func (s *State) mergeKargs() []string {
	b, err := s.BootedDeployment()
	if err != nil {
		return nil
	}
	return slices.Clone(b.Kargs)
}

func (s *State) rebase(ref string, locked bool) result {
	image := ref
	for _, tr := range []string{"ostree-unverified-registry:", "ostree-unverified-image:docker://", "ostree-image-signed:docker://"} {
		if strings.HasPrefix(ref, tr) {
			image = strings.TrimPrefix(ref, tr)
		}
	}
	if image == ref {
		return fail("Invalid refspec %s: only container image references are implemented", ref)
	}
	img, found := s.Images[image]
	if !found {
		return fail("Creating importer: failed to invoke method OpenImage: reading manifest of %s: manifest unknown", image)
	}
	if s.Staged == nil || s.Staged.Checksum != img.Checksum {
		time.Sleep(s.PullDelay)
	}
	s.Staged = &Deployment{Checksum: img.Checksum, ImageRef: ref, Digest: img.Digest, Version: img.Version,
		Kargs: s.mergeKargs(), Serial: s.newSerial(img.Checksum)}
	s.Locked = locked
	return ok("Pulling manifest: %s\nStaging deployment...done\n", ref)
}

func (s *State) deploy(checksum string, locked bool) result {
	for _, img := range s.Images {
		if img.Checksum == checksum {
			if s.Staged == nil || s.Staged.Checksum != checksum {
				time.Sleep(s.PullDelay)
			}
			s.Staged = &Deployment{Checksum: checksum, Version: img.Version, Kargs: s.mergeKargs(), Serial: s.newSerial(checksum)}
			s.Locked = locked
			return ok("Staging deployment...done\n")
		}
	}
	return fail("No commit %s found in the remote", checksum)
}

func (s *State) kargs(flags []string, locked bool) result {
	base, err := s.BootedDeployment()
	if err != nil {
		return fail("%v", err)
	}
	if s.Staged != nil {
		base = s.Staged
	}
	next := *base
	next.Kargs = slices.Clone(base.Kargs)
	changed := false
	for _, f := range flags {
		name, value, _ := strings.Cut(f, "=")
		switch name {
		case "--append-if-missing":
			if !slices.Contains(next.Kargs, value) {
				next.Kargs = append(next.Kargs, value)
				changed = true
			}
		case "--delete-if-present":
			if i := slices.Index(next.Kargs, value); i >= 0 {
				next.Kargs = slices.Delete(next.Kargs, i, i+1)
				changed = true
			}
		case "--lock-finalization":
		default:
			return fail("kargs: the double does not implement %s", f)
		}
	}
	if !changed && len(flags) <= 1 {
		return ok("%s\n", strings.Join(base.Kargs, " "))
	}
	if changed {
		s.Staged = &next
		s.Locked = locked
	}
	return ok("Kernel arguments updated.\n")
}

func (s *State) finalize(pos, flags []string) result {
	if s.Staged == nil {
		return fail("No staged deployment found")
	}
	if len(pos) != 1 {
		return fail("Must provide expected CHECKSUM or --allow-missing-checksum")
	}
	if pos[0] != s.Staged.Checksum {
		return fail("Expected staged base checksum %s, but found %s", pos[0], s.Staged.Checksum)
	}
	if !s.Locked && !slices.Contains(flags, "--allow-unlocked") {
		return fail("Staged deployment already unlocked")
	}
	time.Sleep(s.FinalizeDelay)
	s.Locked = false
	s.RebootRequested = true
	return ok("Finalizing staged deployment\nInitiating reboot...\n")
}

func (s *State) rollback() result {
	s.Staged, s.Locked = nil, false
	if len(s.Deployments) < 2 {
		return fail("No rollback deployment found")
	}
	s.Deployments[0], s.Deployments[1] = s.Deployments[1], s.Deployments[0]
	switch s.Booted {
	case 0:
		s.Booted = 1
	case 1:
		s.Booted = 0
	}
	return ok("Moving '%s' to be first deployment\n", s.Deployments[0].Checksum)
}
