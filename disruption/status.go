package disruption

// StatusObject returns the status.nodeDisruptionPolicyStatus the operator
// writes for p, as unstructured content ({"clusterPolicies": {...}}), for
// tests and simulations in which no operator runs: set it at
// status.nodeDisruptionPolicyStatus of MachineConfiguration/cluster along
// with status.observedGeneration. Empty file and unit lists are left out and
// the sshkey object is always there, as the API's JSON tags have it.
func StatusObject(p Policies) map[string]any {
	cluster := map[string]any{"sshkey": map[string]any{"actions": actionsObject(p.SSHKey)}}
	if len(p.Files) > 0 {
		files := make([]any, 0, len(p.Files))
		for _, f := range p.Files {
			files = append(files, map[string]any{"path": f.Path, "actions": actionsObject(f.Actions)})
		}
		cluster["files"] = files
	}
	if len(p.Units) > 0 {
		units := make([]any, 0, len(p.Units))
		for _, u := range p.Units {
			units = append(units, map[string]any{"name": u.Name, "actions": actionsObject(u.Actions)})
		}
		cluster["units"] = units
	}
	return map[string]any{"clusterPolicies": cluster}
}

func actionsObject(actions []Action) []any {
	out := make([]any, 0, len(actions))
	for _, a := range actions {
		m := map[string]any{"type": string(a.Type)}
		switch a.Type {
		case Reload:
			m["reload"] = map[string]any{"serviceName": a.Unit}
		case Restart:
			m["restart"] = map[string]any{"serviceName": a.Unit}
		}
		out = append(out, m)
	}
	return out
}
