{{- define "narrator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "narrator.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "narrator.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "narrator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "narrator.gpuImage" -}}
{{ .Values.gpuImage.repository }}:{{ .Values.gpuImage.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "narrator.secretName" -}}
{{ .Values.existingSecret | default (printf "%s-secrets" (include "narrator.fullname" .)) }}
{{- end -}}

{{/* The GPU model's queues' suffix: its id as the worker derives it (the checkpoint
     folder's name), made safe as core/queues.py makes it. */}}
{{- define "narrator.gpuQueueSuffix" -}}
{{ regexReplaceAll "[^A-Za-z0-9_-]" (base .Values.workerGpu.model) "_" }}
{{- end -}}

{{/* Every component's configuration: the ConfigMap, then the Secret. */}}
{{- define "narrator.envFrom" -}}
- configMapRef:
    name: {{ include "narrator.fullname" . }}-config
- secretRef:
    name: {{ include "narrator.secretName" . }}
{{- end -}}

{{- define "narrator.podSecurity" -}}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
