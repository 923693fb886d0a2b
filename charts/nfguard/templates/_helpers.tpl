{{/* The image of every component; the tag defaults to the chart's appVersion. */}}
{{- define "nfguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The labels of one component (call with the component's name). Only the two
labels manifests/ uses: the selectors, the webhook Service and the
PodDisruptionBudget depend on them, and a default render stays identical to
manifests/ (no Helm-only labels to strip when comparing).
*/}}
{{- define "nfguard.labels" -}}
app.kubernetes.io/name: nfguard
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{/*
Environment entries every container gets after its own: the log settings
(only when set) and the component's extraEnv.
Call with (dict "root" $ "component" .Values.<component>).
*/}}
{{- define "nfguard.extraEnv" -}}
{{- with .root.Values.log.level }}
- name: NFGUARD_LOG
  value: {{ . | quote }}
{{- end }}
{{- with .root.Values.log.format }}
- name: NFGUARD_LOG_FORMAT
  value: {{ . | quote }}
{{- end }}
{{- with .component.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The registry egress policy's environment (webhook and controller), each
variable only when its list is set, so defaults add nothing.
*/}}
{{- define "nfguard.registryEgressEnv" -}}
{{- range $value, $name := dict "allowCidrs" "NFGUARD_REGISTRY_ALLOW_CIDRS" "denyCidrs" "NFGUARD_REGISTRY_DENY_CIDRS" "allowHosts" "NFGUARD_REGISTRY_ALLOW_HOSTS" "denyHosts" "NFGUARD_REGISTRY_DENY_HOSTS" }}
{{- with index $.Values.registryEgress $value }}
- name: {{ $name }}
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
A private registry's CA (webhook and controller): the environment variable,
the mount and the volume, each only when registryCA.configMapName is set.
*/}}
{{- define "nfguard.registryCAEnv" -}}
{{- if .Values.registryCA.configMapName }}
- name: NFGUARD_REGISTRY_CA_FILES
  value: /etc/nfguard/registry-ca/{{ .Values.registryCA.key }}
{{- end }}
{{- end -}}

{{- define "nfguard.registryCAMount" -}}
{{- if .Values.registryCA.configMapName }}
- name: registry-ca
  mountPath: /etc/nfguard/registry-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "nfguard.registryCAVolume" -}}
{{- with .Values.registryCA.configMapName }}
- name: registry-ca
  configMap:
    name: {{ . }}
{{- end }}
{{- end -}}

{{/*
Pod placement and pull secrets; each field only when set, so defaults add
nothing. Call with (dict "root" $ "component" .Values.<component>).
*/}}
{{- define "nfguard.podPlacement" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .component.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The volume name of a reporter host path: /etc/alternatives -> host-etc-alternatives. */}}
{{- define "nfguard.hostPathVolume" -}}
{{- printf "host-%s" (. | trimPrefix "/" | replace "/" "-" | replace "." "-" | replace "_" "-" | lower) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The value of --metrics-listen. */}}
{{- define "nfguard.metricsListen" -}}
0.0.0.0:{{ .Values.metrics.port }}
{{- end -}}

{{/*
The webhook's own answer deadline in seconds: NFGUARD_TIMEOUT from
webhook.extraEnv when given there, else the binary's default (8).
*/}}
{{- define "nfguard.webhookDeadline" -}}
{{- $deadline := "8" -}}
{{- range .Values.webhook.extraEnv -}}
{{- if eq .name "NFGUARD_TIMEOUT" -}}
{{- $deadline = .value -}}
{{- end -}}
{{- end -}}
{{- $deadline -}}
{{- end -}}

{{/*
A monitoring object's extra labels from values, after nfguard.labels; the two
labels of nfguard.labels cannot be overridden (a duplicate key breaks the
object). Call with (dict "labels" .Values.monitoring.X.labels "value" "monitoring.X.labels")
and only when there are labels.
*/}}
{{- define "nfguard.extraLabels" -}}
{{- range $key, $_ := .labels }}
{{- if has $key (list "app.kubernetes.io/name" "app.kubernetes.io/component") }}
{{- fail (printf "%s: %s is a label nfguard sets itself and cannot be overridden" $.value $key) }}
{{- end }}
{{- end }}
{{- toYaml .labels }}
{{- end -}}

{{/*
Refuses webhook ports that cannot work: the two the same, or (on the node's
network) a port the reporter already holds on every node, where the
scheduler would leave every replica Pending.
*/}}
{{- define "nfguard.webhookPortsFree" -}}
{{- $w := .Values.webhook -}}
{{- if eq (int $w.port) (int $w.metricsPort) -}}
{{- fail (printf "webhook.port and webhook.metricsPort are both %v: give each its own port." $w.port) -}}
{{- end -}}
{{- if $w.hostNetwork -}}
{{- range $p := list (int $w.port) (int $w.metricsPort) -}}
{{- if or (eq $p (int $.Values.metrics.port)) (eq $p (int $.Values.reporter.healthPort)) -}}
{{- fail (printf "webhook port %v is the reporter's (metrics.port %v, reporter.healthPort %v), which it holds on every node: with webhook.hostNetwork no replica could be scheduled. Choose another webhook.port / webhook.metricsPort." $p $.Values.metrics.port $.Values.reporter.healthPort) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
