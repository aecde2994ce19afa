package silence

import (
	"fmt"
	"net/url"
	"regexp"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// labelNameRE is a Prometheus label name, as Alertmanager 0.25 checks a
// matcher's name.
var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Validate checks spec as Alertmanager would check the silences made from
// it, and more: the error names the bad field and its value, such as
// `silences.matchers[0].name ""`. A nil spec (no silences) is valid.
func Validate(spec *v1alpha1.Silences) error {
	if spec == nil {
		return nil
	}
	if err := validateURL(spec.Alertmanager); err != nil {
		return fmt.Errorf("silences.alertmanager %q: %w", spec.Alertmanager, err)
	}
	if spec.NodeLabel != "" && !labelNameRE.MatchString(spec.NodeLabel) {
		return fmt.Errorf("silences.nodeLabel %q: not a label name ([a-zA-Z_][a-zA-Z0-9_]*)", spec.NodeLabel)
	}
	for i, m := range spec.Matchers {
		if !labelNameRE.MatchString(m.Name) {
			return fmt.Errorf("silences.matchers[%d].name %q: not a label name ([a-zA-Z_][a-zA-Z0-9_]*)", i, m.Name)
		}
		if m.IsRegex {
			// Alertmanager anchors the expression (Go's RE2) at both ends.
			if _, err := regexp.Compile("^(?:" + m.Value + ")$"); err != nil {
				return fmt.Errorf("silences.matchers[%d].value %q: not a regular expression: %w", i, m.Value, err)
			}
		}
	}
	return nil
}

// validateURL wants an absolute http(s) URL with a host, and neither a
// query nor a fragment, since the API's paths are appended to it.
func validateURL(s string) error {
	if s == "" {
		return fmt.Errorf("required")
	}
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("the scheme must be http or https")
	case u.Host == "":
		return fmt.Errorf("no host")
	case u.User != nil:
		return fmt.Errorf("credentials do not belong in the URL")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("neither a query nor a fragment: the API's paths are appended")
	}
	return nil
}
