package disruption

// ActionType is one kind of post-change action, spelt as in the
// operator.openshift.io/v1 API (NodeDisruptionPolicyStatusActionType).
type ActionType string

// The action types. Special is the operator's own, for
// /etc/containers/registries.conf: the daemon reloads CRI-O and drains only
// when the change is unsafe (SafeRegistriesChange). Users cannot set it.
const (
	Reboot       ActionType = "Reboot"
	Drain        ActionType = "Drain"
	Reload       ActionType = "Reload"
	Restart      ActionType = "Restart"
	DaemonReload ActionType = "DaemonReload"
	None         ActionType = "None"
	Special      ActionType = "Special"
)

// known says which types a policy may name; false for Special means the
// type exists but is kept for the operator's status.
var known = map[ActionType]bool{
	Reboot: true, Drain: true, Reload: true, Restart: true,
	DaemonReload: true, None: true, Special: false,
}

// Action is one post-change action. Unit is the systemd unit a Reload or
// Restart acts on (the API's reload.serviceName or restart.serviceName) and
// empty for every other type.
type Action struct {
	Type ActionType
	Unit string
}

// String is "Reload crio.service" or "Reboot".
func (a Action) String() string {
	if a.Unit == "" {
		return string(a.Type)
	}
	return string(a.Type) + " " + a.Unit
}

// FilePolicy gives the actions for a change of the file Path or of any file
// under the directory Path.
type FilePolicy struct {
	Path    string
	Actions []Action
}

// UnitPolicy gives the actions for a change of the systemd unit Name.
type UnitPolicy struct {
	Name    string
	Actions []Action
}

// Policies are the cluster's node disruption policies, as in
// status.nodeDisruptionPolicyStatus.clusterPolicies.
type Policies struct {
	Files  []FilePolicy
	Units  []UnitPolicy
	SSHKey []Action
}

const (
	crio           = "crio.service"
	kubelet        = "kubelet.service"
	caTrust        = "coreos-update-ca-trust.service"
	iriRegistry    = "iri-registry.service"
	registriesConf = "/etc/containers/registries.conf"
)

// DefaultPolicies returns the operator's default cluster policies, the table
// it publishes when the user sets none (apihelpers' defaultClusterPolicies).
func DefaultPolicies() Policies {
	reloadCrio := []Action{{Type: Reload, Unit: crio}}
	none := []Action{{Type: None}}
	return Policies{
		Files: []FilePolicy{
			{Path: "/var/lib/kubelet/config.json", Actions: none},
			{Path: "/etc/machine-config-daemon/no-reboot/containers-gpg.pub", Actions: reloadCrio},
			{Path: "/etc/containers/policy.json", Actions: reloadCrio},
			{Path: registriesConf, Actions: []Action{{Type: Special}}},
			{Path: "/etc/containers/registries.d", Actions: reloadCrio},
			{Path: "/etc/crio/policies", Actions: reloadCrio},
			{Path: "/etc/nmstate/openshift", Actions: none},
			{Path: "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
				Actions: []Action{{Type: Restart, Unit: caTrust}, {Type: Restart, Unit: crio}}},
			{Path: "/etc/kubernetes/credential-providers", Actions: []Action{{Type: Restart, Unit: kubelet}}},
			{Path: "/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf",
				Actions: []Action{{Type: DaemonReload}, {Type: Restart, Unit: kubelet}}},
			{Path: "/etc/iri-registry", Actions: []Action{{Type: Restart, Unit: iriRegistry}}},
			{Path: "/usr/local/bin/load-registry-image.sh", Actions: []Action{{Type: Restart, Unit: iriRegistry}}},
			{Path: "/etc/pki/ca-trust/source/anchors/iri-root-ca.crt", Actions: []Action{{Type: Restart, Unit: caTrust}}},
		},
		Units: []UnitPolicy{
			{Name: iriRegistry, Actions: []Action{{Type: DaemonReload}, {Type: Restart, Unit: iriRegistry}}},
		},
		SSHKey: none,
	}
}

// Merge lays user policies over the defaults as the operator does
// (apihelpers' MergeClusterPolicies): a user file policy replaces the
// default of the same path in place, a user unit policy the default of the
// same name, others are appended in the user's order; user SSH key actions
// replace the default when there are any.
func Merge(defaults, user Policies) Policies {
	out := Policies{
		Files:  append([]FilePolicy(nil), defaults.Files...),
		Units:  append([]UnitPolicy(nil), defaults.Units...),
		SSHKey: defaults.SSHKey,
	}
	for _, f := range user.Files {
		out.Files = replaceOrAppend(out.Files, f, len(defaults.Files), func(p FilePolicy) string { return p.Path })
	}
	for _, u := range user.Units {
		out.Units = replaceOrAppend(out.Units, u, len(defaults.Units), func(p UnitPolicy) string { return p.Name })
	}
	if len(user.SSHKey) > 0 {
		out.SSHKey = user.SSHKey
	}
	return out
}

// replaceOrAppend replaces the first of the first n entries with p's key,
// or appends p. Only defaults are replaced: two user policies of one key
// are both kept, as in the operator.
func replaceOrAppend[T any](list []T, p T, n int, key func(T) string) []T {
	for i := range n {
		if key(list[i]) == key(p) {
			list[i] = p
			return list
		}
	}
	return append(list, p)
}
