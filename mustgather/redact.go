package mustgather

import (
	"regexp"
	"strings"
)

// Redacted replaces whatever the redaction takes out, so that a reader
// sees that something was there.
const Redacted = "REDACTED"

// textRule is one pattern of secret the text pass replaces, with what it
// becomes (${1} keeps a named prefix, e.g. the "Bearer " or the key).
type textRule struct {
	name    string
	pattern *regexp.Regexp
	replace string
	// inValue: the rule matches inside one JSON string and may run over
	// encoded JSON; the others may match a key's unquoted value (a
	// number, an object) and run on decoded strings and plain text only.
	inValue bool
}

// textRules are the secrets every written file is scrubbed of, whatever
// its kind (objects, logs, host files). The order matters: a whole PEM
// key block goes before the line rules could cut it in pieces.
var textRules = []textRule{
	// A PEM private key, of any type (RSA, EC, ENCRYPTED, OPENSSH …),
	// with real newlines or JSON-escaped ones.
	{"pem-private-key", regexp.MustCompile(`(?s)-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----`),
		"[" + Redacted + " ${1}]", true},
	// A PEM private key cut short (a log line, a truncated value): the
	// body up to the end of what looks like base64.
	{"pem-private-key-truncated", regexp.MustCompile(`(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(?:\\n|\s|[A-Za-z0-9+/=:,-])+`),
		"${1}" + Redacted, true},
	// An HTTP Authorization header's credentials.
	{"bearer", regexp.MustCompile(`\b([Bb]earer|BEARER|Basic)(\s+)[A-Za-z0-9._~+/=-]{8,}`), "${1}${2}" + Redacted, true},
	// A JSON Web Token (service account tokens, OIDC ID tokens): three
	// base64url parts, the first two JSON objects ("eyJ").
	{"jwt", regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`), Redacted, true},
	// key: value or key=value where the key names a credential, as in a
	// kubeconfig (token, client-key-data), an env file or a flag; the
	// value stops at a quote, a backslash (an escaped newline in JSON), a
	// comma, a brace or white space so that the JSON around it survives.
	{"credential-field", regexp.MustCompile(`(?i)((?:^|[^A-Za-z0-9])` + credentialKey + `\\?"?\s*[:=]\s*\\?"?)([^\s"\\,}]+)`),
		"${1}" + Redacted, false},
}

// credentialKey is a key that names a credential: the key itself may have
// a prefix or suffix (client-key-data, auth-token, id-token, aws_secret…).
const credentialKey = `[A-Za-z0-9_.-]*(?:token|password|passwd|secret|private[-_]?key|client-key-data|client-key|api[-_]?key|credential|auth-provider)[A-Za-z0-9_.-]*`

// credentialKeyPattern: an object's key (a field, a ConfigMap data key,
// an annotation with its prefix) that names a credential.
var credentialKeyPattern = regexp.MustCompile(`(?i)(?:token|password|passwd|secret|private[-_]?key|client-key|api[-_]?key|credential)`)

// RedactText replaces every secret textRules find in data: plain text
// (logs, host files) and decoded strings.
func RedactText(data []byte) []byte {
	for _, r := range textRules {
		data = r.pattern.ReplaceAll(data, []byte(r.replace))
	}
	return data
}

// RedactJSON is the second net over an encoded JSON file whose objects
// went through RedactObject: the rules that stay inside a string value,
// so that the file stays valid JSON (a credential-named key's number or
// object is not touched here; RedactObject replaced its strings).
func RedactJSON(data []byte) []byte {
	for _, r := range textRules {
		if r.inValue {
			data = r.pattern.ReplaceAll(data, []byte(r.replace))
		}
	}
	return data
}

// kubeconfigMarkers: a value holding all of them is a kubeconfig (or
// enough of one) and is dropped whole.
var kubeconfigMarkers = [][]string{
	{"clusters:", "users:"},
	{"kind: Config", "apiVersion:"},
	{`"clusters"`, `"users"`},
	{"current-context", "user:"},
}

// LooksLikeKubeconfig reports whether s reads as a kubeconfig, YAML or
// JSON.
func LooksLikeKubeconfig(s string) bool {
	for _, markers := range kubeconfigMarkers {
		all := true
		for _, m := range markers {
			all = all && strings.Contains(s, m)
		}
		if all {
			return true
		}
	}
	return false
}

// RedactObject scrubs a decoded JSON object in place before it is
// written: metadata.managedFields is dropped, a string under a key that
// names a credential is replaced, a string that reads as a kubeconfig is
// replaced whole, and every other string goes through RedactText. The
// text pass over the written file follows as a second net.
func RedactObject(obj map[string]any) {
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "managedFields")
	}
	redactMap(obj)
}

func redactMap(m map[string]any) {
	for k, v := range m {
		if s, ok := v.(string); ok && credentialKeyPattern.MatchString(k) && s != "" {
			m[k] = Redacted
			continue
		}
		m[k] = redactValue(v)
	}
}

func redactValue(v any) any {
	switch v := v.(type) {
	case string:
		if LooksLikeKubeconfig(v) {
			return Redacted + " (kubeconfig)"
		}
		return string(RedactText([]byte(v)))
	case map[string]any:
		redactMap(v)
	case []any:
		for i := range v {
			v[i] = redactValue(v[i])
		}
	}
	return v
}
