#!/usr/bin/env python3
"""A realistic `helm template`-like stream for scripts/bench-render.sh.

Usage: gen-render-stream.py DOCUMENTS > stream.yaml

Apps of four documents each (a ConfigMap with a config file, a Secret, a
Deployment reading both through env, envFrom and a volume, and a Service),
spread over ten namespaces, each document under a `# Source:` comment as Helm
writes it: about 2 KB a document. Deterministic: the same count gives the
same bytes.
"""

import base64
import hashlib
import sys


def token(seed, n=32):
    out = ""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}/{i}".encode()).hexdigest()
        i += 1
    return out[:n]


def app(i):
    ns = f"team-{i % 10}"
    name = f"svc-{i:05d}"
    config = "\n".join(
        f"    {section}.{key} = {token((i, section, key), 32)}"
        for section in ("server", "cache", "queue", "log", "auth", "metrics", "tracing", "storage")
        for key in ("host", "port", "timeout", "retries", "mode", "pool", "backoff", "region")
    )
    password = base64.b64encode(token((i, "pw"), 24).encode()).decode()
    api_key = base64.b64encode(token((i, "key"), 40).encode()).decode()
    ca = base64.b64encode(token((i, "ca"), 1300).encode()).decode()
    yield f"""# Source: {name}/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}-config
  namespace: {ns}
  labels:
    app.kubernetes.io/name: {name}
    app.kubernetes.io/instance: release-{i % 7}
    app.kubernetes.io/version: "1.{i % 30}.0"
    helm.sh/chart: {name}-0.1.0
data:
  LOG_LEVEL: info
  FEATURE_FLAG: "true"
  WORKERS: "8"
  app.conf: |
{config}
"""
    yield f"""# Source: {name}/templates/secret.yaml
apiVersion: v1
kind: Secret
metadata:
  name: {name}-db
  namespace: {ns}
  labels:
    app.kubernetes.io/name: {name}
    app.kubernetes.io/instance: release-{i % 7}
type: Opaque
data:
  password: {password}
  api-key: {api_key}
  ca.crt: {ca}
"""
    yield f"""# Source: {name}/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
  labels:
    app.kubernetes.io/name: {name}
    app.kubernetes.io/instance: release-{i % 7}
    app.kubernetes.io/version: "1.{i % 30}.0"
spec:
  replicas: {1 + i % 3}
  selector:
    matchLabels:
      app.kubernetes.io/name: {name}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {name}
        app.kubernetes.io/instance: release-{i % 7}
      annotations:
        prometheus.io/scrape: "true"
    spec:
      serviceAccountName: {name}
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000
      containers:
        - name: app
          image: "registry.example.com/{name}:1.{i % 30}.0"
          imagePullPolicy: IfNotPresent
          args: ["--config", "/etc/app/app.conf", "--port", "8080"]
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
          env:
            - name: LOG_LEVEL
              valueFrom:
                configMapKeyRef:
                  name: {name}-config
                  key: LOG_LEVEL
            - name: DB_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: {name}-db
                  key: password
          envFrom:
            - configMapRef:
                name: {name}-config
          resources:
            limits: {{cpu: 500m, memory: 256Mi}}
            requests: {{cpu: 100m, memory: 128Mi}}
          readinessProbe:
            httpGet: {{path: /healthz, port: http}}
            periodSeconds: 10
          volumeMounts:
            - name: config
              mountPath: /etc/app
              readOnly: true
      volumes:
        - name: config
          configMap:
            name: {name}-config
            items:
              - key: app.conf
                path: app.conf
"""
    yield f"""# Source: {name}/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {ns}
  labels:
    app.kubernetes.io/name: {name}
spec:
  type: ClusterIP
  ports:
    - port: 80
      targetPort: http
      protocol: TCP
      name: http
  selector:
    app.kubernetes.io/name: {name}
"""


def main():
    documents = int(sys.argv[1])
    out = sys.stdout
    written = 0
    i = 0
    while written < documents:
        for document in app(i):
            if written == documents:
                break
            out.write("---\n")
            out.write(document)
            written += 1
        i += 1


if __name__ == "__main__":
    main()
