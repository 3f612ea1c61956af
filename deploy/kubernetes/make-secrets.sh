#!/usr/bin/env bash
# Writes the files the kustomization's Secrets are made from, under
# secrets/ (git-ignored, 0600), from one deployment secret:
#   - auth.conf: the nats-server authorization block (`switchyard nats-config`):
#     the frontend user, and one user per worker id that may publish only
#     under its own id;
#   - each bus user's password (`switchyard nats-password`);
#   - random admin, API and worker keys.
# Re-running keeps existing secrets; add a worker id to WORKERS and re-run
# to give it a login. Needs the switchyard binary (SWITCHYARD=path).
set -euo pipefail
cd "$(dirname "$0")"
sy=${SWITCHYARD:-switchyard}
workers=${WORKERS:-sim-worker-0,sim-worker-1,sim-worker-2,sim-worker-3,vllm-0}
ns=${SWITCHYARD_NAMESPACE:-default} # the deployments' --namespace (subjects), not the Kubernetes one
umask 077
mkdir -p secrets/workers
rnd() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
[ -s secrets/deployment-secret ] || rnd > secrets/deployment-secret
for f in admin-key api-key worker-key; do
  [ -s "secrets/$f" ] || rnd > "secrets/$f"
done
"$sy" nats-config --workers "$workers" --namespace "$ns" --secret-file secrets/deployment-secret > secrets/auth.conf
"$sy" nats-password --frontend --secret-file secrets/deployment-secret > secrets/frontend-nats-password
for id in ${workers//,/ }; do
  "$sy" nats-password --id "$id" --secret-file secrets/deployment-secret > "secrets/workers/$id"
done
echo "wrote $(pwd)/secrets; now: kubectl apply -k $(pwd)"
echo "for examples/vllm.yaml: kubectl -n switchyard create secret generic switchyard-worker-vllm-0 \\"
echo "    --from-file=nats-password=$(pwd)/secrets/workers/vllm-0 --from-file=worker-key=$(pwd)/secrets/worker-key"
