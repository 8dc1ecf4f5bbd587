{{- define "kubicle.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubicle.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- /* The image of a component: (dict "root" . "component" "node"|"operator").
The tag defaults to appVersion, the tag scripts/build-images.sh gives both. */ -}}
{{- define "kubicle.image" -}}
{{ (index .root.Values.image .component).repository }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}
