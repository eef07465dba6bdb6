package main

import (
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// check looks past each object's schema at what a type cannot say: every container is probed,
// sized and locked down, and the objects that point at others (a Service's selector and target
// ports, a PodDisruptionBudget, an autoscaler, a ServiceMonitor, a NetworkPolicy, the keys a container reads from
// a Secret or ConfigMap of the same input) find what they point at.
func check(objects []object) []string {
	var faults []string
	fault := func(where, format string, args ...any) {
		faults = append(faults, where+": "+fmt.Sprintf(format, args...))
	}
	var deployments []*appsv1.Deployment
	var services []*corev1.Service
	keys := map[string]map[string]bool{} // "Secret/name" or "ConfigMap/name" -> its keys
	for _, o := range objects {
		switch v := o.value.(type) {
		case *appsv1.Deployment:
			deployments = append(deployments, v)
		case *corev1.Service:
			services = append(services, v)
		case *corev1.Secret:
			keys["Secret/"+v.Name] = keyset(v.Data, v.StringData)
		case *corev1.ConfigMap:
			keys["ConfigMap/"+v.Name] = keyset(v.Data, v.BinaryData)
		}
	}
	selects := func(where string, selector *metav1.LabelSelector, what string, targets []map[string]string) {
		s, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil || s.Empty() {
			fault(where, "%s: an empty or invalid selector (%v)", what, err)
			return
		}
		for _, target := range targets {
			if s.Matches(labels.Set(target)) {
				return
			}
		}
		fault(where, "%s %s matches nothing in the input", what, s)
	}
	var podLabels []map[string]string
	for _, d := range deployments {
		podLabels = append(podLabels, d.Spec.Template.Labels)
	}

	for _, o := range objects {
		switch v := o.value.(type) {
		case *appsv1.Deployment:
			selects(o.where, v.Spec.Selector, "spec.selector", []map[string]string{v.Spec.Template.Labels})
			checkPod(o.where, &v.Spec.Template.Spec, keys, fault)
		case *corev1.Service:
			selects(o.where, &metav1.LabelSelector{MatchLabels: v.Spec.Selector}, "spec.selector", podLabels)
			for _, port := range v.Spec.Ports {
				if port.TargetPort.Type == intstr.String && !namedPortIn(deployments, port.TargetPort.StrVal) {
					fault(o.where, "port %s: targetPort %q is no container's named port", port.Name, port.TargetPort.StrVal)
				}
			}
		case *policyv1.PodDisruptionBudget:
			selects(o.where, v.Spec.Selector, "spec.selector", podLabels)
		case *autoscalingv2.HorizontalPodAutoscaler:
			ref := v.Spec.ScaleTargetRef
			if ref.Kind != "Deployment" || !deploymentNamed(deployments, ref.Name) {
				fault(o.where, "scaleTargetRef %s %s is not a Deployment of the input", ref.Kind, ref.Name)
			}
		case *networkingv1.NetworkPolicy:
			selects(o.where, &v.Spec.PodSelector, "spec.podSelector", podLabels)
			for _, rule := range v.Spec.Ingress {
				for _, port := range rule.Ports {
					if port.Port != nil && port.Port.Type == intstr.String && !namedPortIn(deployments, port.Port.StrVal) {
						fault(o.where, "ingress port %q is no container's named port", port.Port.StrVal)
					}
				}
				if len(rule.From) == 0 {
					fault(o.where, "an ingress rule without from admits every source")
				}
			}
		case *monitoringv1.ServiceMonitor:
			var serviceLabels []map[string]string
			for _, s := range services {
				serviceLabels = append(serviceLabels, s.Labels)
			}
			selects(o.where, &v.Spec.Selector, "spec.selector", serviceLabels)
			for _, endpoint := range v.Spec.Endpoints {
				if !servicePortNamed(services, endpoint.Port) {
					fault(o.where, "endpoint port %q is no Service's port name", endpoint.Port)
				}
			}
		}
	}
	return faults
}

func checkPod(where string, pod *corev1.PodSpec, keys map[string]map[string]bool, fault func(string, string, ...any)) {
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
	}
	podNonRoot := pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot
	for _, c := range pod.Containers {
		at := fmt.Sprintf("%s: container %s", where, c.Name)
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			fault(at, "needs a readinessProbe and a livenessProbe")
		}
		for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if probe != nil && !probesAPort(&c, probe) {
				fault(at, "a probe's port is not one of the container's ports")
			}
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			fault(at, "needs CPU and memory requests and a memory limit")
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !dropsAll(sc.Capabilities.Drop) ||
			!(podNonRoot || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)) {
			fault(at, "needs runAsNonRoot, readOnlyRootFilesystem, no privilege escalation and every capability dropped")
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				fault(at, "volumeMount %s names no volume of the pod", m.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				checkKey(at, e.Name, "Secret/"+r.Name, r.Key, r.Optional, keys, fault)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				checkKey(at, e.Name, "ConfigMap/"+r.Name, r.Key, r.Optional, keys, fault)
			}
		}
	}
}

// checkKey: a key read from a Secret or ConfigMap of the input must be there, unless optional.
// One that is not in the input (an existing Secret) cannot be checked.
func checkKey(at, env, source, key string, optional *bool, keys map[string]map[string]bool, fault func(string, string, ...any)) {
	have, inInput := keys[source]
	if inInput && !have[key] && (optional == nil || !*optional) {
		fault(at, "env %s reads key %q, which %s does not have", env, key, source)
	}
}

func probesAPort(c *corev1.Container, probe *corev1.Probe) bool {
	switch {
	case probe.GRPC != nil:
		return hasPort(c, intstr.FromInt32(probe.GRPC.Port))
	case probe.HTTPGet != nil:
		return hasPort(c, probe.HTTPGet.Port)
	case probe.TCPSocket != nil:
		return hasPort(c, probe.TCPSocket.Port)
	}
	return true
}

func hasPort(c *corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return true
		}
	}
	return false
}

func dropsAll(drop []corev1.Capability) bool {
	for _, c := range drop {
		if c == "ALL" {
			return true
		}
	}
	return false
}

func keyset[A, B any](a map[string]A, b map[string]B) map[string]bool {
	set := map[string]bool{}
	for k := range a {
		set[k] = true
	}
	for k := range b {
		set[k] = true
	}
	return set
}

func namedPortIn(deployments []*appsv1.Deployment, name string) bool {
	for _, d := range deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if hasPort(&c, intstr.FromString(name)) {
				return true
			}
		}
	}
	return false
}

func deploymentNamed(deployments []*appsv1.Deployment, name string) bool {
	for _, d := range deployments {
		if d.Name == name {
			return true
		}
	}
	return false
}

func servicePortNamed(services []*corev1.Service, name string) bool {
	for _, s := range services {
		for _, p := range s.Spec.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}
