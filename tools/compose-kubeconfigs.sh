#!/bin/sh
# The two kubeconfigs docker compose mounts (docker-compose.yml): ingest's read-only
# identity and the actuator's own, as on Kubernetes. Creates the namespace gangpreempt,
# the ServiceAccounts gangpreempt-ingest and gangpreempt-actuator, deploy/k8s's RBAC for
# them (ingest-rbac.yaml; actuator-rbac.yaml, and the grants of act mode, which compose
# runs in, from components/act) and the actuator's admission policy; then writes
# deploy/kubeconfig-ingest and deploy/kubeconfig-actuator, each holding only its own
# token (no credential of yours). Run it from the repository's root with a kubeconfig
# allowed to create those (the current context). DURATION: the tokens' lifetime (720h
# by default; the API server may cap it): run it again to renew them.
set -eu
DURATION=${DURATION:-720h}
kubectl create namespace gangpreempt --dry-run=client -o yaml | kubectl apply -f -
for s in ingest actuator; do
  kubectl -n gangpreempt create serviceaccount "gangpreempt-$s" --dry-run=client -o yaml |
    kubectl apply -f -
done
kubectl apply -f deploy/k8s/ingest-rbac.yaml -f deploy/k8s/actuator-rbac.yaml \
  -f deploy/k8s/components/act/rbac.yaml -f deploy/k8s/actuator-policy.yaml
yours=$(kubectl config view --minify -o jsonpath='{.contexts[0].context.user}')
for s in ingest actuator; do
  out="deploy/kubeconfig-$s"
  umask 077
  kubectl config view --raw --minify --flatten > "$out"
  token=$(kubectl -n gangpreempt create token "gangpreempt-$s" --duration="$DURATION")
  kubectl --kubeconfig "$out" config set-credentials "gangpreempt-$s" --token="$token" >/dev/null
  kubectl --kubeconfig "$out" config set-context --current --user="gangpreempt-$s" >/dev/null
  kubectl --kubeconfig "$out" config unset "users.$yours" >/dev/null
done
echo "wrote deploy/kubeconfig-ingest and deploy/kubeconfig-actuator (tokens for $DURATION);"
echo "give them to the image's user: sudo chown 10001 deploy/kubeconfig-*"
