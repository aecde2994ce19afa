package oomkill

import (
	"strings"
)

// PodOf names the pod and the container of a kubelet cgroup path, for both
// of the kubelet's cgroup drivers, v1 or v2, absolute or relative:
//
//	systemd:  kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope
//	cgroupfs: kubepods/burstable/pod<uid>/<id>
//
// The systemd driver writes the pod UID with underscores for dashes; the UID
// returned has dashes, as the API server spells it. A path above the pod
// (kubepods, a QoS class) gives two empty strings, the pod's own cgroup an
// empty container ID. A ".scope" that is not a container (crio-conmon-<id>)
// gives an empty container ID too.
func PodOf(cgroupPath string) (podUID, containerID string) {
	parts := strings.Split(strings.Trim(cgroupPath, "/"), "/")
	for i, part := range parts {
		uid, ok := podComponent(part)
		if !ok {
			continue
		}
		podUID = uid
		containerID = ""
		if i+1 < len(parts) {
			containerID = containerComponent(parts[i+1])
		}
	}
	return podUID, containerID
}

// podComponent recognises a pod's cgroup: "pod<uid>" (cgroupfs) or
// "kubepods[-<qos>]-pod<uid>.slice" (systemd).
func podComponent(part string) (uid string, ok bool) {
	switch {
	case strings.HasSuffix(part, ".slice"):
		name := strings.TrimSuffix(part, ".slice")
		if !strings.HasPrefix(name, "kubepods-") {
			return "", false
		}
		i := strings.LastIndex(name, "-pod")
		if i < 0 {
			return "", false
		}
		uid = name[i+len("-pod"):]
	case strings.HasPrefix(part, "pod"):
		uid = part[len("pod"):]
	default:
		return "", false
	}
	if !isUID(uid) {
		return "", false
	}
	return strings.ReplaceAll(uid, "_", "-"), true
}

// containerComponent recognises a container's cgroup under its pod's:
// "<runtime>-<id>.scope" (systemd: cri-containerd-, crio-, docker-) or the
// bare ID (cgroupfs).
func containerComponent(part string) string {
	if name, ok := strings.CutSuffix(part, ".scope"); ok {
		i := strings.LastIndex(name, "-")
		if i < 0 || strings.Contains(name[:i], "conmon") {
			return ""
		}
		part = name[i+1:]
	}
	if !isHex(part) {
		return ""
	}
	return part
}

// isUID accepts a pod UID: hexadecimal digits with dashes or underscores
// (a static pod's UID is a hash without either).
func isUID(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c != '-' && c != '_' && !isHexDigit(c) {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !isHexDigit(c) {
			return false
		}
	}
	return true
}

func isHexDigit(c rune) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
