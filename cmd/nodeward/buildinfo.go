package main

import "github.com/nodeward/nodeward/api/kube"

// buildInfo is this binary's build for nodeward_build_info.
func buildInfo() kube.BuildInfo { return kube.BuildInfo{Version: version, Commit: commit} }
