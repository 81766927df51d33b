{{/*
The name of the release's objects: the release name when it has syncgc in it (the release
syncgc names everything as manifests/ does), else RELEASE-syncgc. Short enough for the
longest suffix (-critical-pods) to keep a Service's or Secret's name within 63 characters.
*/}}
{{- define "syncgc.fullname" -}}
{{- $name := .Release.Name -}}
{{- if not (contains "syncgc" $name) -}}
{{- $name = printf "%s-syncgc" $name -}}
{{- end -}}
{{- $name | trunc 48 | trimSuffix "-" -}}
{{- end -}}

{{/* The chart's labels, but for who manages the object. */}}
{{- define "syncgc.chartLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The chart's labels. */}}
{{- define "syncgc.labels" -}}
{{ include "syncgc.chartLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The image: repository@digest, or repository:tag (v and the appVersion by default). */}}
{{- define "syncgc.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default (printf "v%s" .Chart.AppVersion)) -}}
{{- end -}}
{{- end -}}

{{/* The webhook's Service. */}}
{{- define "syncgc.serviceName" -}}
{{- printf "%s-webhook" (include "syncgc.fullname" .) -}}
{{- end -}}

{{/* The Secret syncgc keeps its CA and serving certificate in (self-managed). */}}
{{- define "syncgc.tlsSecretName" -}}
{{- printf "%s-webhook-tls" (include "syncgc.fullname" .) -}}
{{- end -}}

{{/* The Secret of cert-manager's Certificate. */}}
{{- define "syncgc.certSecretName" -}}
{{- printf "%s-webhook-cert" (include "syncgc.fullname" .) -}}
{{- end -}}

{{/* The namespaces the webhook never sees: the value's and the release's own. */}}
{{- define "syncgc.excludedNamespaces" -}}
{{- append .Values.excludedNamespaces .Release.Namespace | uniq | join "," -}}
{{- end -}}

