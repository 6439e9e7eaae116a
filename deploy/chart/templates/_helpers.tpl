{{/*
The labels every object carries: the overlays' app.kubernetes.io/part-of, and
the three that say which release and chart made it (deploy/check compares
the chart with the overlays without these three).
*/}}
{{- define "rollout-hooks.labels" -}}
app.kubernetes.io/part-of: rollout-hooks
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* An image of the project: REGISTRY/NAME:TAG. Call with (list $ "NAME"). */}}
{{- define "rollout-hooks.image" -}}
{{- $root := index . 0 -}}
{{- printf "%s/%s:%s" $root.Values.image.registry (index . 1) ($root.Values.image.tag | default $root.Chart.AppVersion) -}}
{{- end }}

{{/* The mode, checked: sidecar or central. */}}
{{- define "rollout-hooks.mode" -}}
{{- $mode := .Values.gateway.mode -}}
{{- if not (has $mode (list "sidecar" "central")) -}}
{{- fail (printf "gateway.mode must be sidecar or central, not %q" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end }}

{{/* OTLP export environment for a container. Call with (list $ "SERVICE"). */}}
{{- define "rollout-hooks.otelEnv" -}}
{{- $root := index . 0 -}}
{{- with $root.Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ index $ 1 }}
- name: OTEL_TRACES_SAMPLER
  value: {{ $root.Values.tracing.sampler }}
{{- end }}
{{- end }}

{{/* The restricted Pod Security Standard's container securityContext. */}}
{{- define "rollout-hooks.containerSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "rollout-hooks.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
A Secret of files made from values, unless existing names one. Call with
(dict "root" $ "name" NAME "namespace" NS "existing" NAME-OR-"" "type" TYPE
"data" (dict KEY CONTENT ...)); fails naming the value that is missing.
*/}}
{{- define "rollout-hooks.secret" -}}
{{- if not .existing }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "rollout-hooks.labels" .root | nindent 4 }}
{{- with .type }}
type: {{ . }}
{{- end }}
data:
{{- range $key, $value := .data }}
  {{- if not $value.content }}
  {{- fail (printf "%s is empty: give it (--set-file %s=FILE), or name an existing Secret" $value.value $value.value) }}
  {{- end }}
  {{ $key }}: {{ $value.content | b64enc }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret name in use: existing, else the chart's own. */}}
{{- define "rollout-hooks.secretName" -}}
{{- .existing | default .name -}}
{{- end }}
