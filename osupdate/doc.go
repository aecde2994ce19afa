// Package osupdate drives rpm-ostree: it reads the deployment status, stages a
// target with finalization locked, finalizes it, verifies the booted OS and
// rolls back, every call bounded by a timeout and retried when transient.
//
// A target is one string, `REF [ARG...]`: REF is an ostree container image
// reference or a 64-hex OSTree commit checksum; each ARG is a kernel
// argument that must be on the booted command line (`nosmt`,
// `mitigations=auto`, `foo="a b"`), or, written `!ARG`, one that must not
// be (`!mitigations=off`). The string is split as the kernel splits its
// command line: whitespace separates arguments except inside double quotes,
// which stay in the argument. ParseTarget refuses unbalanced quotes, quotes
// in a key, whitespace outside quotes or other than a space, control
// characters, empty keys, and an argument both required and deleted; each
// error names the argument. Target.String is the canonical form (required
// arguments sorted, then deleted ones sorted) and parses back to the same
// Target. Stage applies the arguments with one `rpm-ostree kargs
// --lock-finalization --delete-if-present=… --append-if-missing=…`;
// Verify and Booted compare them with /proc/cmdline as the kernel reads
// both, quotes removed (GRUB boots foo="a b" as "foo=a b").
//
// With Config.AuthFile (usually KubeletPullSecret), Stage makes
// OstreeAuthFile a link to that pull secret before a rebase, as OpenShift's
// machine-config-daemon does, but only when the secret exists and
// OstreeAuthFile is absent: an auth file already there that is not that
// link is left alone, with a warning.
//
// Image references are validated by hand (imageref.go), not with
// github.com/distribution/reference, for the agent's resident memory: that
// package and go-digest compile their grammars into regexps at init (414 KB
// and 92 KB allocated, GODEBUG=inittrace=1) that stay live for the whole
// process. imageref_test.go holds the hand-written parser to the library's
// verdicts, on a table, exhaustively on short references and under a fuzzer.
// For the same reason `rpm-ostree status --json` is decoded into nodeward's
// own Status and Deployment (status.go), not rpmostree-client-go's, which
// link github.com/containers/image/v5/docker/reference (264 KB at init);
// status_test.go decodes the library's real fixtures with both.
package osupdate
