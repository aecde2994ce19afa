#!/usr/bin/python3
"""Derive a release index (the shape of releases.json) for one stream from
the git history of coreos/fedora-coreos-streams: every version that ever
appeared in updates/<stream>.json, ordered by version. The payloads are
SYNTHETIC (see README.md): the real releases.json, with the real ostree
commit checksums and OCI image digests, is not in that repository.

usage: derive-releases.py REPO_GIT_DIR COMMIT STREAM > releases/STREAM.json
"""
import hashlib
import json
import re
import subprocess
import sys

ARCHES = ["aarch64", "ppc64le", "s390x", "x86_64"]


def git(gitdir, *args):
    return subprocess.run(["git", "--git-dir", gitdir, *args], check=True,
                          capture_output=True, text=True).stdout


def version_key(version):
    # 30.20190716.1 (the earliest releases) has three fields.
    return tuple(int(p) for p in re.findall(r"[0-9]+", version))


def synthetic(kind, version, arch):
    text = "nodeward synthetic %s %s %s" % (kind, version, arch)
    return hashlib.sha256(text.encode()).hexdigest()


def main():
    gitdir, commit, stream = sys.argv[1:4]
    path = "updates/%s.json" % stream
    versions = set()
    for rev in git(gitdir, "log", "--format=%H", commit, "--", path).split():
        try:
            doc = json.loads(git(gitdir, "show", "%s:%s" % (rev, path)))
        except (json.JSONDecodeError, subprocess.CalledProcessError):
            continue
        for release in doc.get("releases", []):
            versions.add(release["version"])
    releases = []
    for version in sorted(versions, key=version_key):
        releases.append({
            "commits": [{"architecture": a, "checksum": synthetic("ostree-commit", version, a)} for a in ARCHES],
            "oci-images": [{"architecture": a, "image": "quay.io/fedora/fedora-coreos",
                            "digest-ref": "quay.io/fedora/fedora-coreos@sha256:" + synthetic("oci-image", version, a)}
                           for a in ARCHES],
            "version": version,
            "metadata": "https://builds.coreos.fedoraproject.org/prod/streams/%s/builds/%s/release.json" % (stream, version),
        })
    json.dump({"note": "derived by derive-releases.py: versions real, payloads synthetic",
               "releases": releases, "metadata": {"last-modified": "derived", "stream": stream}},
              sys.stdout, indent=1)
    sys.stdout.write("\n")


main()
