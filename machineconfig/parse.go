package machineconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coreos/go-semver/semver"
)

const (
	apiVersion = "machineconfiguration.openshift.io/v1"
	kind       = "MachineConfig"
)

// Ignition spec versions the MCO accepts in a MachineConfig.
var (
	minIgnition = semver.Version{Major: 3}
	maxIgnition = semver.Version{Major: 3, Minor: 5}
)

// object is the part of a MachineConfig object nodeward reads. Unknown
// fields are ignored, as the API server would keep them.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Config                         json.RawMessage `json:"config"`
		KernelArguments                []string        `json:"kernelArguments"`
		Extensions                     []string        `json:"extensions"`
		FIPS                           bool            `json:"fips"`
		KernelType                     string          `json:"kernelType"`
		OSImageURL                     string          `json:"osImageURL"`
		BaseOSExtensionsContainerImage string          `json:"baseOSExtensionsContainerImage"`
	} `json:"spec"`
}

// Parse reads the JSON of a whole MachineConfig object. Every refusal is a
// *FieldError.
func Parse(obj []byte) (*Config, error) {
	var o object
	if err := json.Unmarshal(obj, &o); err != nil {
		return nil, jsonFieldError(err)
	}
	if err := checkHeader(&o); err != nil {
		return nil, err
	}
	cfg := &Config{
		Name:                           o.Metadata.Name,
		OSImageURL:                     o.Spec.OSImageURL,
		KernelArgs:                     parseKernelArgs(o.Spec.KernelArguments),
		Extensions:                     o.Spec.Extensions,
		KernelType:                     o.Spec.KernelType,
		FIPS:                           o.Spec.FIPS,
		BaseOSExtensionsContainerImage: o.Spec.BaseOSExtensionsContainerImage,
	}
	if err := parseIgnition(o.Spec.Config, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// jsonFieldError names the field of a JSON type error; a syntax error has
// no field, so it is reported on the object as a whole.
func jsonFieldError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fieldErr(typeErr.Field, typeErr.Value, "wrong JSON type, want "+typeErr.Type.String())
	}
	return &FieldError{Field: "(object)", Reason: "not a JSON object: " + err.Error()}
}

func checkHeader(o *object) error {
	if o.APIVersion != apiVersion {
		return fieldErr("apiVersion", o.APIVersion, "want "+apiVersion)
	}
	if o.Kind != kind {
		return fieldErr("kind", o.Kind, "want "+kind)
	}
	if o.Metadata.Name == "" {
		return fieldErr("metadata.name", "", "must not be empty")
	}
	return nil
}

// checkIgnitionVersion refuses what the MCO refuses before Ignition's own
// parser sees it, so the error names the version field and the range.
func checkIgnitionVersion(raw []byte) (string, error) {
	var stub struct {
		Ignition struct {
			Version *string `json:"version"`
		} `json:"ignition"`
	}
	if err := json.Unmarshal(raw, &stub); err != nil {
		return "", &FieldError{Field: "spec.config", Reason: "not an Ignition config: " + err.Error()}
	}
	const field = "spec.config.ignition.version"
	if stub.Ignition.Version == nil {
		return "", fieldErr(field, "", "missing")
	}
	v, err := semver.NewVersion(*stub.Ignition.Version)
	if err != nil {
		return "", fieldErr(field, *stub.Ignition.Version, "not a semantic version")
	}
	if v.PreRelease != "" || v.Patch != 0 || v.LessThan(minIgnition) || maxIgnition.LessThan(*v) {
		return "", fieldErr(field, *stub.Ignition.Version,
			fmt.Sprintf("unsupported Ignition spec version, want %s to %s", minIgnition, maxIgnition))
	}
	return *stub.Ignition.Version, nil
}

// isEmptyConfig tells an absent spec.config, which the MCO treats as an
// empty Ignition config, from one that is present.
func isEmptyConfig(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
