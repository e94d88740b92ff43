{{/*
Labels on every object's metadata. app.kubernetes.io/part-of is the one the
kustomize base puts there too; the other four are Helm's own (tests/chart.rs
strips exactly these four before comparing with the base). Pod templates and
selectors carry only app.kubernetes.io/name, as in the base, so selectors never
change between releases.
*/}}
{{- define "configsum.labels" -}}
app.kubernetes.io/part-of: configsum
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "configsum.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The pod security context of every pod. */}}
{{- define "configsum.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/* The security context of every container. */}}
{{- define "configsum.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end }}

{{/* Pod template metadata: the name label, and podAnnotations if any. Argument: (list $ "name"). */}}
{{- define "configsum.podMetadata" -}}
{{- $ := index . 0 -}}
{{- $annotations := deepCopy ($.Values.podAnnotations | default dict) -}}
{{- if and $.Values.customKinds (has (index . 1) (list "configsum-webhook" "configsum-controller")) -}}
{{- /* The file is read at start-up: a changed declaration restarts the pods that read it. */ -}}
{{- $_ := set $annotations "configsum.dev/custom-kinds-checksum" (include "configsum.customKindsFile" $ | sha256sum) -}}
{{- end }}
metadata:
  labels:
    app.kubernetes.io/name: {{ index . 1 }}
    {{- if gt (len .) 2 }}
    {{- range $key, $value := index . 2 }}
    {{ $key }}: {{ $value | quote }}
    {{- end }}
    {{- end }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The CustomKinds file of the customKinds value (docs/custom-kinds.md). */}}
{{- define "configsum.customKindsFile" -}}
apiVersion: configsum.dev/v1alpha1
kind: CustomKinds
kinds:
{{- toYaml .Values.customKinds | nindent 0 }}
{{- end }}

{{/* Pod spec fields shared by every pod: pull secrets, node selector, tolerations. */}}
{{- define "configsum.podScheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The registry CA volume, when registry.ca names a ConfigMap or a Secret. */}}
{{- define "configsum.registryCaEnabled" -}}
{{- if and .Values.registry.ca.configMap .Values.registry.ca.secret -}}
{{- fail "registry.ca: set configMap or secret, not both" -}}
{{- end -}}
{{- if or .Values.registry.ca.configMap .Values.registry.ca.secret }}true{{ end -}}
{{- end }}

{{/*
Arguments the webhook and the controller share, after the ones the base
passes: the annotation domain and the registry flags. Each is passed only when
set, so the defaults render the base's arguments exactly.
*/}}
{{/*
namespaceSelector in the API server's string syntax, for the controller's --namespace-selector:
the same selector the webhook configuration carries.
*/}}
{{- define "configsum.namespaceSelector" -}}
{{- $terms := list -}}
{{- range $key, $value := .Values.namespaceSelector.matchLabels -}}
{{- $terms = append $terms (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- range .Values.namespaceSelector.matchExpressions -}}
{{- if eq .operator "In" -}}
{{- $terms = append $terms (printf "%s in (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "NotIn" -}}
{{- $terms = append $terms (printf "%s notin (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "Exists" -}}
{{- $terms = append $terms .key -}}
{{- else if eq .operator "DoesNotExist" -}}
{{- $terms = append $terms (printf "!%s" .key) -}}
{{- else -}}
{{- fail (printf "namespaceSelector: operator %q is not In, NotIn, Exists or DoesNotExist" .operator) -}}
{{- end -}}
{{- end -}}
{{- join "," $terms -}}
{{- end -}}

{{- define "configsum.sharedArgs" -}}
{{- with .Values.annotationDomain }}
- --annotation-domain={{ . }}
{{- end }}
{{- with .Values.objectSelector }}
- {{ printf "--object-selector=%s" . | quote }}
{{- end }}
{{- range .Values.registry.insecureRegistries }}
- --insecure-registry={{ . }}
{{- end }}
{{- range .Values.registry.allow }}
- --registry-allow={{ . }}
{{- end }}
{{- if include "configsum.registryCaEnabled" . }}
- --registry-ca-file=/etc/configsum/registry-ca/{{ .Values.registry.ca.key }}
{{- end }}
{{- if .Values.customKinds }}
- --custom-kinds=/etc/configsum/custom-kinds/kinds.yaml
{{- end }}
{{- end }}

{{/* Volume mounts the webhook and the controller share: the registry CA, the custom kinds. */}}
{{- define "configsum.sharedMounts" -}}
{{- if include "configsum.registryCaEnabled" . }}
- name: registry-ca
  mountPath: /etc/configsum/registry-ca
  readOnly: true
{{- end }}
{{- if .Values.customKinds }}
- name: custom-kinds
  mountPath: /etc/configsum/custom-kinds
  readOnly: true
{{- end }}
{{- end }}

{{- define "configsum.sharedVolumes" -}}
{{- if .Values.registry.ca.configMap }}
- name: registry-ca
  configMap:
    name: {{ .Values.registry.ca.configMap }}
{{- else if .Values.registry.ca.secret }}
- name: registry-ca
  secret:
    secretName: {{ .Values.registry.ca.secret }}
{{- end }}
{{- if .Values.customKinds }}
- name: custom-kinds
  configMap:
    name: configsum-custom-kinds
{{- end }}
{{- end }}

{{/* A custom kind's apiGroup and version, from its apiVersion. Argument: the kind. */}}
{{- define "configsum.kindGroup" -}}
{{- index (splitList "/" .apiVersion) 0 -}}
{{- end }}
{{- define "configsum.kindVersion" -}}
{{- index (splitList "/" .apiVersion) 1 -}}
{{- end }}

{{/* The Secret the webhook serves TLS from. */}}
{{- define "configsum.tlsSecret" -}}
{{- if eq .Values.tls.mode "certManager" -}}
configsum-webhook-tls
{{- else -}}
{{ required "tls.existingSecret is required with tls.mode=secret" .Values.tls.existingSecret }}
{{- end -}}
{{- end }}

{{/*
The webhook's rules: a ClusterRole's with rbac.scope cluster, a Role's in each of `namespaces`
with rbac.scope namespaced.
*/}}
{{- define "configsum.webhookRules" -}}
# serviceaccounts: their imagePullSecrets, for images behind floating tags.
- apiGroups: [""]
  resources: ["configmaps", "secrets", "serviceaccounts"]
  verbs: ["get"]
# Workloads that roll together: the pod template of a workload another one tracks.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets", "replicasets"]
  verbs: ["get"]
- apiGroups: ["argoproj.io"]
  resources: ["rollouts"]
  verbs: ["get"]
{{- range .Values.customKinds }}
{{- if and .template (not (eq .rolls false)) }}
- apiGroups: [{{ include "configsum.kindGroup" . | quote }}]
  resources: [{{ .resource | quote }}]
  verbs: ["get"]
{{- end }}
{{- end }}
{{- if .Values.csi.enabled }}
# SecretProviderClass rotations: what the CSI driver reports of a namespace's mounts.
- apiGroups: ["secrets-store.csi.x-k8s.io"]
  resources: ["secretproviderclasspodstatuses"]
  verbs: ["list"]
{{- end }}
{{- end -}}

{{/*
The controller's rules on objects and workloads (namespaces aside): a ClusterRole's with
rbac.scope cluster, a Role's in each of `namespaces` with rbac.scope namespaced.
*/}}
{{- define "configsum.controllerRules" -}}
# Workloads come from the watch.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets", "replicasets"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["argoproj.io"]
  resources: ["rollouts"]
  verbs: ["list", "watch", "patch"]
# Workloads that roll together: a tracked workload's pod template, read once when the
# watch delivered it before anything tracked it.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets", "replicasets"]
  verbs: ["get"]
- apiGroups: ["argoproj.io"]
  resources: ["rollouts"]
  verbs: ["get"]
{{- range .Values.customKinds }}
{{- if and .template (not (eq .rolls false)) }}
- apiGroups: [{{ include "configsum.kindGroup" . | quote }}]
  resources: [{{ .resource | quote }}]
  verbs: ["get"]
{{- end }}
{{- end }}
{{- range .Values.customKinds }}
{{- if not (eq .rolls false) }}
- apiGroups: [{{ include "configsum.kindGroup" . | quote }}]
  resources: [{{ .resource | quote }}]
  verbs: ["list", "watch", "patch"]
{{- end }}
{{- end }}
- apiGroups: [""]
  resources: ["configmaps", "secrets"]
  verbs: ["get", "list", "watch"]
{{- if .Values.csi.enabled }}
# SecretProviderClass rotations: the CSI driver's statuses, watched once served.
- apiGroups: ["secrets-store.csi.x-k8s.io"]
  resources: ["secretproviderclasspodstatuses"]
  verbs: ["list", "watch"]
{{- end }}
# The image pull secrets of tracked images' ServiceAccounts.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}

{{/* `--namespaces`, for the webhook and the controller, when the list is set. */}}
{{- define "configsum.namespacesArg" -}}
{{- if .Values.namespaces }}
- --namespaces={{ join "," .Values.namespaces }}
{{- end }}
{{- end -}}
