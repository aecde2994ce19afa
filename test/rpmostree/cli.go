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

// invocation is one command line given to the double: its verb and what
// follows it, also split into options and positional arguments.
type invocation struct {
	verb  string
	rest  []string // everything after the verb, in order
	flags []string
	pos   []string
}

func parseInvocation(args []string) invocation {
	c := invocation{verb: args[0], rest: args[1:]}
	for _, a := range c.rest {
		if strings.HasPrefix(a, "-") {
			c.flags = append(c.flags, a)
		} else {
			c.pos = append(c.pos, a)
		}
	}
	return c
}

func (c invocation) hasFlag(flag string) bool {
	return slices.Contains(c.flags, flag)
}

// commands maps each verb the double implements to its handler; a function
// rather than a package variable so that nothing can change the table.
func commands() map[string]func(*State, invocation) result {
	return map[string]func(*State, invocation) result{
		"status":              (*State).statusCommand,
		"rebase":              (*State).rebaseCommand,
		"deploy":              (*State).deployCommand,
		"kargs":               func(s *State, c invocation) result { return s.kargs(c.rest) },
		"finalize-deployment": func(s *State, c invocation) result { return s.finalize(c.pos, c.flags) },
		"rollback":            func(s *State, _ invocation) result { return s.rollback() },
		"cleanup":             (*State).cleanupCommand,
	}
}

func (s *State) dispatch(args []string) result {
	if len(args) == 0 {
		return fail("no command given")
	}
	c := parseInvocation(args)
	if r, injected := s.injectedFailure(c.verb); injected {
		return r
	}
	command, known := commands()[c.verb]
	if !known {
		return fail("Unknown command '%s'", c.verb)
	}
	return command(s, c)
}

// injectedFailure consumes the failure injected for verb, if any, and
// returns what the invocation answers instead of running. A failure of an
// unknown mode is consumed and the command runs.
func (s *State) injectedFailure(verb string) (result, bool) {
	f, found := s.takeFailure(verb)
	if !found {
		return result{}, false
	}
	switch f.Mode {
	case "timeout":
		return result{code: ExitHang}, true
	case "exit":
		return result{err: []byte(f.Stderr + "\n"), code: 1}, true
	case "garbage":
		return ok("\x00{not json at all \"deployments\": [\n"), true
	case "busy":
		// A busy daemon still answers status, showing the other
		// client's transaction.
		if verb != "status" {
			return fail("Transaction in progress: rebase\n You can cancel the current transaction with `rpm-ostree cancel`"), true
		}
		out, err := s.StatusJSON([]string{"rebase", "client(id:other-agent)"})
		if err != nil {
			return fail("%v", err), true
		}
		return result{out: out}, true
	}
	return result{}, false
}

func (s *State) statusCommand(c invocation) result {
	if !c.hasFlag("--json") {
		return fail("the double only implements status --json")
	}
	out, err := s.StatusJSON(nil)
	if err != nil {
		return fail("%v", err)
	}
	return result{out: out}
}

func (s *State) rebaseCommand(c invocation) result {
	if len(c.pos) != 1 {
		return fail("rebase: want exactly one REFSPEC")
	}
	return s.rebase(c.pos[0], c.hasFlag("--lock-finalization"))
}

func (s *State) deployCommand(c invocation) result {
	if len(c.pos) != 1 {
		return fail("deploy: want exactly one REVISION")
	}
	return s.deploy(c.pos[0], c.hasFlag("--lock-finalization"))
}

// cleanupCommand implements cleanup -p; it refuses -r, which would delete
// the rollback deployment.
func (s *State) cleanupCommand(c invocation) result {
	if c.hasFlag("-p") {
		s.Staged, s.Locked = nil, false
	}
	if c.hasFlag("-r") {
		return fail("the double refuses cleanup -r: nodeward must never delete the rollback deployment")
	}
	return ok("Deployments unchanged.\n")
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

// kargsValueOptions are the options of `rpm-ostree kargs` that take a
// value (`--opt=VALUE` or `--opt VALUE`, as GOption parses them) and that
// the double implements.
var kargsValueOptions = []string{"--append", "--append-if-missing", "--delete", "--delete-if-present"}

// kargs edits the kernel arguments of the pending deployment (the staged
// one, else the booted one) as rpm-ostree's daemon does
// (kernel_arg_apply_patching): every --delete, then every --append, then
// every --append-if-missing (skipped when the exact string is already an
// argument), then every --delete-if-present (only when the exact string
// was an argument before the call), whatever their order on the command
// line. Arguments are split and kept as libostree does: spaces separate
// them except inside double quotes, and the quotes stay. Nothing changed
// prints "No changes." and stages nothing; no edit option prints the
// arguments.
func (s *State) kargs(rest []string) result {
	opts := map[string][]string{}
	locked, edits := false, 0
	for i := 0; i < len(rest); i++ {
		name, value, hasValue := strings.Cut(rest[i], "=")
		switch {
		case name == "--lock-finalization" && !hasValue:
			locked = true
		case slices.Contains(kargsValueOptions, name):
			if !hasValue {
				if i+1 >= len(rest) {
					return fail("Missing argument for %s", name)
				}
				i++
				value = rest[i]
			}
			opts[name] = append(opts[name], value)
			edits++
		case strings.HasPrefix(rest[i], "-"):
			return fail("kargs: the double does not implement %s", rest[i])
		default:
			return fail("kargs: the double takes no positional argument (%q)", rest[i])
		}
	}
	base, err := s.BootedDeployment()
	if err != nil {
		return fail("%v", err)
	}
	if s.Staged != nil {
		base = s.Staged
	}
	if edits == 0 {
		return ok("%s\n", strings.Join(base.Kargs, " "))
	}
	existing := slices.Clone(base.Kargs)
	kargs := slices.Clone(base.Kargs)
	changed := false
	for _, a := range opts["--delete"] {
		if kargs, err = deleteKarg(kargs, a); err != nil {
			return fail("%v", err)
		}
		changed = true
	}
	for _, a := range opts["--append"] {
		kargs = append(kargs, SplitKargs(a)...)
		changed = true
	}
	for _, a := range opts["--append-if-missing"] {
		if !slices.Contains(kargs, a) {
			kargs = append(kargs, SplitKargs(a)...)
			changed = true
		}
	}
	for _, a := range opts["--delete-if-present"] {
		if slices.Contains(existing, a) {
			if kargs, err = deleteKarg(kargs, a); err != nil {
				return fail("%v", err)
			}
			changed = true
		}
	}
	if !changed {
		return ok("No changes.\n")
	}
	next := *base
	next.Kargs = kargs
	s.Staged = &next
	s.Locked = locked
	return ok("Staging deployment...done\nKernel arguments updated.\n")
}

// SplitKargs splits kernel arguments as libostree does (split_kernel_args):
// on spaces outside double quotes, quotes kept; an unterminated quote makes
// the rest one argument.
func SplitKargs(s string) []string {
	var args []string
	quoted := false
	start := 0
	for start < len(s) && s[start] == ' ' {
		start++
	}
	for i := start; i < len(s); i++ {
		switch {
		case s[i] == '"':
			quoted = !quoted
		case s[i] == ' ' && !quoted:
			args = append(args, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		args = append(args, s[start:])
	}
	return args
}

// deleteKarg deletes each argument of arg from kargs as
// ostree_kernel_args_delete does: a key with one value goes whatever that
// value when arg names the key alone; otherwise the exact key=value (or
// bare key) must be there. Its errors are libostree's.
func deleteKarg(kargs []string, arg string) ([]string, error) {
	for _, a := range SplitKargs(arg) {
		key, val, hasVal := strings.Cut(a, "=")
		var same []int
		for i, k := range kargs {
			if kk, _, _ := strings.Cut(k, "="); kk == key {
				same = append(same, i)
			}
		}
		switch {
		case len(same) == 0:
			//lint:ignore ST1005 libostree's own message, as rpm-ostree prints it
			return nil, fmt.Errorf("No key '%s' found", key)
		case len(same) == 1:
			if _, v, has := strings.Cut(kargs[same[0]], "="); hasVal && (!has || v != val) {
				//lint:ignore ST1005 libostree's own message, as rpm-ostree prints it
				return nil, fmt.Errorf("No karg '%s=%s' found", key, val)
			}
			kargs = slices.Delete(kargs, same[0], same[0]+1)
			continue
		}
		i := slices.IndexFunc(same, func(i int) bool { return kargs[i] == a })
		if i < 0 {
			if !hasVal {
				//lint:ignore ST1005 libostree's own message, as rpm-ostree prints it
				return nil, fmt.Errorf("Multiple values for key '%s' found", a)
			}
			//lint:ignore ST1005 libostree's own message, as rpm-ostree prints it
			return nil, fmt.Errorf("No karg '%s' found", a)
		}
		kargs = slices.Delete(kargs, same[i], same[i]+1)
	}
	return kargs, nil
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
