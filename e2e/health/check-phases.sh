#!/usr/bin/env bash
# CTest health_phases: every phase of every kind, as the operator's pure
# status functions compute it (kubicle-health-phases, operator/
# health_phases.h), through the real kstatus library and the chart's Argo CD
# Lua health checks (kubicle-health --expect); then checks that the
# documented argocd-cm patch holds exactly those scripts.
# Usage: check-phases.sh <kubicle-health-phases binary>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
argocd="$here/../../helm/kubicle/argocd"
checker=$("$here/build.sh")
"$1" | "$checker" --argocd "$argocd" --expect
"$checker" --argocd "$argocd" --argocd-cm "$argocd/argocd-cm.yaml"
