package cluster

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The defaults below are the API server's (pkg/apis/core/v1/defaults.go and
// pkg/apis/apps/v1/defaults.go in kubernetes/kubernetes) for the fields the
// lab reads.

// DefaultService fills type ClusterIP, sessionAffinity None, port protocol
// TCP, targetPort = port, and the primary ClusterIP in both clusterIP and
// clusterIPs[0] (see defaultClusterIPs).
func DefaultService(s *corev1.Service) {
	if s.Spec.Type == "" {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if s.Spec.Type != corev1.ServiceTypeExternalName {
		defaultClusterIPs(&s.Spec)
	}
	if s.Spec.SessionAffinity == "" {
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		if s.Spec.SessionAffinityConfig == nil {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}
		if s.Spec.SessionAffinityConfig.ClientIP == nil {
			s.Spec.SessionAffinityConfig.ClientIP = &corev1.ClientIPConfig{}
		}
		if s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			t := corev1.DefaultClientIPServiceAffinitySeconds
			s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = &t
		}
	}
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
}

// defaultClusterIPs makes clusterIP and clusterIPs[0] the same address,
// filling whichever is empty (the API server's normalizeClusterIPs), and
// asks for RequireDualStack when two ClusterIPs or families are given
// without a policy (its initIPFamilyFields).
func defaultClusterIPs(spec *corev1.ServiceSpec) {
	switch {
	case spec.ClusterIP == "" && len(spec.ClusterIPs) > 0:
		spec.ClusterIP = spec.ClusterIPs[0]
	case spec.ClusterIP != "" && len(spec.ClusterIPs) == 0:
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	if spec.IPFamilyPolicy == nil && (len(spec.ClusterIPs) == 2 || len(spec.IPFamilies) == 2) {
		p := corev1.IPFamilyPolicyRequireDualStack
		spec.IPFamilyPolicy = &p
	}
}

// DefaultDeployment fills replicas 1, strategy RollingUpdate 25%/25%,
// revisionHistoryLimit 10, progressDeadlineSeconds 600 and the pod defaults.
func DefaultDeployment(d *appsv1.Deployment) {
	if d.Spec.Replicas == nil {
		one := int32(1)
		d.Spec.Replicas = &one
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if d.Spec.Strategy.RollingUpdate == nil {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		quarter := intstr.FromString("25%")
		if d.Spec.Strategy.RollingUpdate.MaxSurge == nil {
			d.Spec.Strategy.RollingUpdate.MaxSurge = &quarter
		}
		if d.Spec.Strategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = &quarter
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		ten := int32(10)
		d.Spec.RevisionHistoryLimit = &ten
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		s := int32(600)
		d.Spec.ProgressDeadlineSeconds = &s
	}
	DefaultPodSpec(&d.Spec.Template.Spec)
}

// DefaultStatefulSet fills replicas 1, podManagementPolicy OrderedReady,
// updateStrategy RollingUpdate (with an empty rollingUpdate when the type was
// unset), rollingUpdate.partition 0 and maxUnavailable 1 (the defaults with
// the MaxUnavailableStatefulSet feature on), revisionHistoryLimit 10 and the
// pod defaults.
func DefaultStatefulSet(s *appsv1.StatefulSet) {
	if s.Spec.Replicas == nil {
		one := int32(1)
		s.Spec.Replicas = &one
	}
	if s.Spec.PodManagementPolicy == "" {
		s.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	us := &s.Spec.UpdateStrategy
	if us.Type == "" {
		us.Type = appsv1.RollingUpdateStatefulSetStrategyType
		if us.RollingUpdate == nil {
			us.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if us.Type == appsv1.RollingUpdateStatefulSetStrategyType && us.RollingUpdate != nil {
		if us.RollingUpdate.Partition == nil {
			zero := int32(0)
			us.RollingUpdate.Partition = &zero
		}
		if us.RollingUpdate.MaxUnavailable == nil {
			one := intstr.FromInt32(1)
			us.RollingUpdate.MaxUnavailable = &one
		}
	}
	if s.Spec.RevisionHistoryLimit == nil {
		ten := int32(10)
		s.Spec.RevisionHistoryLimit = &ten
	}
	DefaultPodSpec(&s.Spec.Template.Spec)
}

// ValidateStatefulSet checks metadata (the name must be a DNS-1123 label,
// as apps ValidateStatefulSetName requires, since it prefixes pod names and
// hostnames), replicas, selector, template labels, podManagementPolicy,
// updateStrategy (RollingUpdate or OnDelete; partition >= 0; maxUnavailable
// a positive number or a percentage in (0%, 100%]), minReadySeconds and
// the pod template (see validatePodTemplate), with the API server's
// messages.
func ValidateStatefulSet(s *appsv1.StatefulSet) error {
	errs := validateMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSLabel)
	spec := field.NewPath("spec")
	if s.Spec.Replicas != nil && *s.Spec.Replicas < 0 {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *s.Spec.Replicas, "must be greater than or equal to 0"))
	}
	if s.Spec.Selector == nil || len(s.Spec.Selector.MatchLabels)+len(s.Spec.Selector.MatchExpressions) == 0 {
		errs = append(errs, field.Required(spec.Child("selector"), "a StatefulSet needs a non-empty selector"))
	} else if sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("selector"), s.Spec.Selector, err.Error()))
	} else if !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
		errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), s.Spec.Template.Labels,
			"`selector` does not match template `labels`"))
	}
	switch s.Spec.PodManagementPolicy {
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		errs = append(errs, field.NotSupported(spec.Child("podManagementPolicy"), s.Spec.PodManagementPolicy, []string{"OrderedReady", "Parallel"}))
	}
	errs = append(errs, validateStatefulSetStrategy(&s.Spec.UpdateStrategy, spec.Child("updateStrategy"))...)
	if s.Spec.MinReadySeconds < 0 {
		errs = append(errs, field.Invalid(spec.Child("minReadySeconds"), s.Spec.MinReadySeconds, "must be greater than or equal to 0"))
	}
	if len(s.Spec.Template.Spec.Containers) == 0 {
		errs = append(errs, field.Required(spec.Child("template", "spec", "containers"), "a pod needs at least one container"))
	}
	errs = append(errs, validatePodTemplate(&s.Spec.Template, spec.Child("template"))...)
	if len(errs) == 0 {
		return nil
	}
	return invalid("StatefulSet", s.Name, errs...)
}

func validateStatefulSetStrategy(us *appsv1.StatefulSetUpdateStrategy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch us.Type {
	case appsv1.OnDeleteStatefulSetStrategyType:
		if us.RollingUpdate != nil {
			errs = append(errs, field.Invalid(path.Child("rollingUpdate"), us.RollingUpdate, "only allowed for updateStrategy 'RollingUpdate'"))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if ru := us.RollingUpdate; ru != nil {
			rp := path.Child("rollingUpdate")
			if ru.Partition != nil && *ru.Partition < 0 {
				errs = append(errs, field.Invalid(rp.Child("partition"), *ru.Partition, "must be greater than or equal to 0"))
			}
			if ru.MaxUnavailable != nil {
				mp := rp.Child("maxUnavailable")
				errs = append(errs, validateIntOrPercent(*ru.MaxUnavailable, mp, true)...)
				if intOrPercentValue(*ru.MaxUnavailable) == 0 {
					errs = append(errs, field.Invalid(mp, *ru.MaxUnavailable, "cannot be 0"))
				}
			}
		}
	default:
		errs = append(errs, field.Invalid(path, us, "must be 'RollingUpdate' or 'OnDelete'"))
	}
	return errs
}

// validateIntOrPercent checks a non-negative number or a percentage "N%",
// with upTo100 at most 100% (ValidatePositiveIntOrPercent,
// IsNotMoreThan100Percent).
func validateIntOrPercent(v intstr.IntOrString, path *field.Path, upTo100 bool) field.ErrorList {
	if v.Type == intstr.String {
		n, ok := percent(v.StrVal)
		if !ok {
			return field.ErrorList{field.Invalid(path, v.StrVal, "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")}
		}
		if upTo100 && n > 100 {
			return field.ErrorList{field.Invalid(path, v.StrVal, "must not be greater than 100%")}
		}
		return nil
	}
	if v.IntVal < 0 {
		return field.ErrorList{field.Invalid(path, v.IntVal, "must be greater than or equal to 0")}
	}
	return nil
}

// percent parses "N%" with N made of digits.
func percent(s string) (int, bool) {
	digits, ok := strings.CutSuffix(s, "%")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// intOrPercentValue is the number or the percentage's number (-1 if malformed).
func intOrPercentValue(v intstr.IntOrString) int {
	if v.Type == intstr.Int {
		return int(v.IntVal)
	}
	n, ok := percent(v.StrVal)
	if !ok {
		return -1
	}
	return n
}

// DefaultPodSpec fills restartPolicy Always, terminationGracePeriodSeconds 30,
// container port protocol TCP and probe timing defaults.
func DefaultPodSpec(s *corev1.PodSpec) {
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.TerminationGracePeriodSeconds == nil {
		g := int64(corev1.DefaultTerminationGracePeriodSeconds)
		s.TerminationGracePeriodSeconds = &g
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	for i := range s.Containers {
		c := &s.Containers[i]
		for j := range c.Ports {
			if c.Ports[j].Protocol == "" {
				c.Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
		defaultProbe(c.ReadinessProbe)
		defaultProbe(c.LivenessProbe)
		defaultProbe(c.StartupProbe)
	}
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
}

func invalid(kind, name string, errs ...*field.Error) error {
	return apierrors.NewInvalid(schema.GroupKind{Kind: kind}, name, errs)
}

// ValidateService checks metadata (the name must be a DNS-1035 label, as
// the API server's ValidateServiceName requires) and the Service fields the
// lab depends on; port names must be DNS-1123 labels.
func ValidateService(s *corev1.Service) error {
	errs := validateMeta(&s.ObjectMeta, true, apivalidation.NameIsDNS1035Label)
	spec := field.NewPath("spec")
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName:
	default:
		errs = append(errs, field.NotSupported(spec.Child("type"), s.Spec.Type,
			[]string{string(corev1.ServiceTypeClusterIP), string(corev1.ServiceTypeExternalName)}))
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName && s.Spec.ExternalName == "" {
		errs = append(errs, field.Required(spec.Child("externalName"), "required for type ExternalName"))
	}
	// As the API server's validateServiceSessionAffinity: None or ClientIP,
	// and a ClientIP timeout in (0, 86400].
	switch s.Spec.SessionAffinity {
	case "", corev1.ServiceAffinityNone:
		if s.Spec.SessionAffinityConfig != nil {
			errs = append(errs, field.Forbidden(spec.Child("sessionAffinityConfig"), "must not be set when sessionAffinity is None"))
		}
	case corev1.ServiceAffinityClientIP:
		if c := s.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			if t := *c.ClientIP.TimeoutSeconds; t <= 0 || t > maxClientIPAffinitySeconds {
				errs = append(errs, field.Invalid(spec.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), t,
					fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPAffinitySeconds)))
			}
		}
	default:
		errs = append(errs, field.NotSupported(spec.Child("sessionAffinity"), s.Spec.SessionAffinity,
			[]string{string(corev1.ServiceAffinityNone), string(corev1.ServiceAffinityClientIP)}))
	}
	if s.Spec.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, validateClusterIPs(&s.Spec, spec)...)
	}
	if s.Spec.Type == corev1.ServiceTypeClusterIP && s.Spec.ClusterIP != corev1.ClusterIPNone && len(s.Spec.Ports) == 0 {
		errs = append(errs, field.Required(spec.Child("ports"), "a ClusterIP Service needs at least one port"))
	}
	names := map[string]bool{}
	for i, p := range s.Spec.Ports {
		pp := spec.Child("ports").Index(i)
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, field.Invalid(pp.Child("port"), p.Port, "must be between 1 and 65535"))
		}
		if len(s.Spec.Ports) > 1 && p.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), "every port of a multi-port Service needs a name"))
		}
		if p.Name != "" && names[p.Name] {
			errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
		}
		if p.Name != "" {
			errs = append(errs, dns1123Label(pp.Child("name"), p.Name)...)
		}
		names[p.Name] = true
		switch p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), p.Protocol, []string{"TCP", "UDP", "SCTP"}))
		}
		if p.TargetPort.Type == intstr.Int && (p.TargetPort.IntVal < 1 || p.TargetPort.IntVal > 65535) {
			errs = append(errs, field.Invalid(pp.Child("targetPort"), p.TargetPort.IntVal, "must be between 1 and 65535"))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return invalid("Service", s.Name, errs...)
}

// validateClusterIPs checks the addresses and IP families of a Service
// that is not an ExternalName, after defaultClusterIPs, as the API
// server's validateClusterIPs and initIPFamilyFields do on a dual-stack
// cluster whose primary family is IPv4: clusterIP is "None" or an IPv4
// address (the lab's VIPs are IPv4 loopback) and equals clusterIPs[0]; a
// second ClusterIP is IPv6 and needs a dual-stack policy. The lab
// allocates no IPv6 ClusterIPs, so RequireDualStack needs its IPv6 address
// written in clusterIPs[1]; PreferDualStack without one stays IPv4 only,
// as on a cluster without an IPv6 range.
func validateClusterIPs(s *corev1.ServiceSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	ip := s.ClusterIP
	if ip != "" && ip != corev1.ClusterIPNone {
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is4() {
			errs = append(errs, field.Invalid(spec.Child("clusterIP"), ip, `must be a valid IPv4 address or "None" (the lab's primary family is IPv4)`))
		}
	}
	ips := spec.Child("clusterIPs")
	switch {
	case len(s.ClusterIPs) > 2:
		errs = append(errs, field.TooMany(ips, len(s.ClusterIPs), 2))
	case len(s.ClusterIPs) > 0 && s.ClusterIPs[0] != ip:
		errs = append(errs, field.Invalid(ips.Index(0), s.ClusterIPs[0], "must match `clusterIP`"))
	case len(s.ClusterIPs) == 2:
		errs = append(errs, validateSecondaryIP(s, spec)...)
	}
	for i, f := range s.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			errs = append(errs, field.NotSupported(spec.Child("ipFamilies").Index(i), f, []string{string(corev1.IPv4Protocol), string(corev1.IPv6Protocol)}))
		}
	}
	if len(s.IPFamilies) > 0 && s.IPFamilies[0] != corev1.IPv4Protocol {
		errs = append(errs, field.Invalid(spec.Child("ipFamilies").Index(0), s.IPFamilies[0], "the lab's primary family is IPv4 (its VIPs are on loopback); put IPv4 first"))
	}
	return append(errs, validateIPFamilyPolicy(s, spec)...)
}

// validateSecondaryIP checks clusterIPs[1].
func validateSecondaryIP(s *corev1.ServiceSpec, spec *field.Path) field.ErrorList {
	ip, at := s.ClusterIPs[1], spec.Child("clusterIPs").Index(1)
	a, err := netip.ParseAddr(ip)
	switch {
	case s.ClusterIP == corev1.ClusterIPNone:
		return field.ErrorList{field.Invalid(at, ip, `a headless Service has only "None"`)}
	case err != nil || !a.Is6() || a.Is4In6():
		return field.ErrorList{field.Invalid(at, ip, "must be an IPv6 address: a dual-stack Service has one ClusterIP per family")}
	case s.IPFamilyPolicy != nil && *s.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack:
		return field.ErrorList{field.Invalid(spec.Child("ipFamilyPolicy"), *s.IPFamilyPolicy,
			"must be RequireDualStack or PreferDualStack when multiple cluster IPs are specified")}
	}
	return nil
}

// validateIPFamilyPolicy checks spec.ipFamilyPolicy: a known value, and
// RequireDualStack only with an IPv6 ClusterIP written out, since the
// lab has no IPv6 Service range to allocate one from.
func validateIPFamilyPolicy(s *corev1.ServiceSpec, spec *field.Path) field.ErrorList {
	p := s.IPFamilyPolicy
	if p == nil {
		return nil
	}
	switch *p {
	case corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack:
		return nil
	case corev1.IPFamilyPolicyRequireDualStack:
		if s.ClusterIP == corev1.ClusterIPNone || len(s.ClusterIPs) == 2 {
			return nil
		}
		return field.ErrorList{field.Invalid(spec.Child("ipFamilyPolicy"), *p,
			"the lab allocates no IPv6 ClusterIPs (its Service range is IPv4 loopback); write the IPv6 address in spec.clusterIPs[1] (the cluster DNS then serves it as AAAA and ip6.arpa PTR)")}
	}
	return field.ErrorList{field.NotSupported(spec.Child("ipFamilyPolicy"), *p, []string{
		string(corev1.IPFamilyPolicySingleStack), string(corev1.IPFamilyPolicyPreferDualStack), string(corev1.IPFamilyPolicyRequireDualStack)})}
}

// ValidateDeployment checks metadata (the name must be a DNS-1123
// subdomain), replicas, selector, template labels, strategy (Recreate
// without rollingUpdate; RollingUpdate with maxSurge and maxUnavailable
// non-negative numbers or percentages, maxUnavailable at most 100%, not both
// 0), minReadySeconds >= 0, revisionHistoryLimit >= 0 and
// progressDeadlineSeconds > minReadySeconds and the pod template (see
// validatePodTemplate), with the API server's messages.
func ValidateDeployment(d *appsv1.Deployment) error {
	errs := validateMeta(&d.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
	spec := field.NewPath("spec")
	if d.Spec.Replicas != nil && *d.Spec.Replicas < 0 {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *d.Spec.Replicas, "must be greater than or equal to 0"))
	}
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels)+len(d.Spec.Selector.MatchExpressions) == 0 {
		errs = append(errs, field.Required(spec.Child("selector"), "a Deployment needs a non-empty selector"))
	} else if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("selector"), d.Spec.Selector, err.Error()))
	} else if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), d.Spec.Template.Labels,
			"`selector` does not match template `labels`"))
	}
	errs = append(errs, validateDeploymentStrategy(&d.Spec.Strategy, spec.Child("strategy"))...)
	if d.Spec.MinReadySeconds < 0 {
		errs = append(errs, field.Invalid(spec.Child("minReadySeconds"), d.Spec.MinReadySeconds, "must be greater than or equal to 0"))
	}
	if d.Spec.RevisionHistoryLimit != nil && *d.Spec.RevisionHistoryLimit < 0 {
		errs = append(errs, field.Invalid(spec.Child("revisionHistoryLimit"), *d.Spec.RevisionHistoryLimit, "must be greater than or equal to 0"))
	}
	if p := d.Spec.ProgressDeadlineSeconds; p != nil && *p <= d.Spec.MinReadySeconds {
		errs = append(errs, field.Invalid(spec.Child("progressDeadlineSeconds"), *p, "must be greater than minReadySeconds"))
	}
	if len(d.Spec.Template.Spec.Containers) == 0 {
		errs = append(errs, field.Required(spec.Child("template", "spec", "containers"), "a pod needs at least one container"))
	}
	errs = append(errs, validatePodTemplate(&d.Spec.Template, spec.Child("template"))...)
	if len(errs) == 0 {
		return nil
	}
	return invalid("Deployment", d.Name, errs...)
}

func validateDeploymentStrategy(s *appsv1.DeploymentStrategy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(path.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		ru := s.RollingUpdate
		if ru == nil {
			return append(errs, field.Required(path.Child("rollingUpdate"), "this should be defaulted and never be nil"))
		}
		rp := path.Child("rollingUpdate")
		zero := intstr.FromInt32(0)
		surge, unavailable := *intstr.ValueOrDefault(ru.MaxSurge, zero), *intstr.ValueOrDefault(ru.MaxUnavailable, zero)
		errs = append(errs, validateIntOrPercent(unavailable, rp.Child("maxUnavailable"), true)...)
		errs = append(errs, validateIntOrPercent(surge, rp.Child("maxSurge"), false)...)
		if intOrPercentValue(unavailable) == 0 && intOrPercentValue(surge) == 0 {
			errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), unavailable.String(), "may not be 0 when `maxSurge` is 0"))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), s.Type, []string{"Recreate", "RollingUpdate"}))
	}
	return errs
}

// validateMeta checks metadata as the API server's ValidateObjectMeta does
// on create (name by nameFn, namespace, labels, annotations, owner
// references). An empty namespace of a namespaced object counts as
// "default", the namespace a create without one goes to.
func validateMeta(m *metav1.ObjectMeta, namespaced bool, nameFn apivalidation.ValidateNameFunc) field.ErrorList {
	if namespaced && m.Namespace == "" {
		m = m.DeepCopy()
		m.Namespace = metav1.NamespaceDefault
	}
	return apivalidation.ValidateObjectMeta(m, namespaced, nameFn, field.NewPath("metadata"))
}

func dns1123Label(path *field.Path, v string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(path, v, msg))
	}
	return errs
}

// ValidateNamespace checks a Namespace's metadata: its name must be a
// DNS-1123 label (apimachinery ValidateNamespaceName).
func ValidateNamespace(ns *corev1.Namespace) error {
	if errs := validateMeta(&ns.ObjectMeta, false, apivalidation.ValidateNamespaceName); len(errs) > 0 {
		return invalid("Namespace", ns.Name, errs...)
	}
	return nil
}

// EndpointSlice limits of the API server (discovery validation).
const (
	maxSliceEndpoints = 1000
	maxSliceAddresses = 100
)

// ValidateEndpointSlice checks an EndpointSlice as the API server's
// discovery validation does for the fields the lab reads: the name (a
// DNS-1123 subdomain), addressType, 1 to 100 addresses per endpoint of
// that type, each hostname a DNS-1123 label (DNS names it), and port
// names, numbers and protocols.
func ValidateEndpointSlice(es *discoveryv1.EndpointSlice) error {
	errs := validateMeta(&es.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("addressType"), es.AddressType, []string{"IPv4", "IPv6", "FQDN"}))
	}
	errs = append(errs, validateEndpoints(es)...)
	errs = append(errs, validateSlicePorts(es.Ports)...)
	if len(errs) == 0 {
		return nil
	}
	return invalid("EndpointSlice", es.Name, errs...)
}

func validateEndpoints(es *discoveryv1.EndpointSlice) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("endpoints")
	if len(es.Endpoints) > maxSliceEndpoints {
		errs = append(errs, field.TooMany(path, len(es.Endpoints), maxSliceEndpoints))
	}
	for i, ep := range es.Endpoints {
		p := path.Index(i)
		switch n := len(ep.Addresses); {
		case n == 0:
			errs = append(errs, field.Required(p.Child("addresses"), "must contain at least 1 address"))
		case n > maxSliceAddresses:
			errs = append(errs, field.TooMany(p.Child("addresses"), n, maxSliceAddresses))
		}
		for j, a := range ep.Addresses {
			if msg := badAddress(es.AddressType, a); msg != "" {
				errs = append(errs, field.Invalid(p.Child("addresses").Index(j), a, msg))
			}
		}
		if ep.Hostname != nil {
			for _, e := range dns1123Label(p.Child("hostname"), *ep.Hostname) {
				e.Detail += " (a DNS-1123 label: the endpoint's DNS name is <hostname>.<service>.<namespace>.svc.<zone>)"
				errs = append(errs, e)
			}
		}
	}
	return errs
}

// badAddress says why a is not an address of type t, or "".
func badAddress(t discoveryv1.AddressType, a string) string {
	if t == discoveryv1.AddressTypeFQDN {
		if errs := validation.IsFullyQualifiedDomainName(nil, a); len(errs) > 0 {
			return errs[0].Detail
		}
		return ""
	}
	ip, err := netip.ParseAddr(a)
	if err != nil || ip.Zone() != "" || ip.Is4() != (t == discoveryv1.AddressTypeIPv4) {
		return fmt.Sprintf("must be a valid %s address", t)
	}
	return ""
}

func validateSlicePorts(ports []discoveryv1.EndpointPort) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, p := range ports {
		pp := field.NewPath("ports").Index(i)
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != "" {
			errs = append(errs, dns1123Label(pp.Child("name"), name)...)
		}
		if seen[name] {
			errs = append(errs, field.Duplicate(pp.Child("name"), name))
		}
		seen[name] = true
		if p.Protocol != nil {
			switch *p.Protocol {
			case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			default:
				errs = append(errs, field.NotSupported(pp.Child("protocol"), *p.Protocol, []string{"TCP", "UDP", "SCTP"}))
			}
		}
		if p.Port != nil {
			for _, msg := range validation.IsValidPortNum(int(*p.Port)) {
				errs = append(errs, field.Invalid(pp.Child("port"), *p.Port, msg))
			}
		}
	}
	return errs
}

// Validate defaults a copy of obj and validates it as the lab's API server
// validates a create of it, without allocating anything (so a ClusterIP
// outside the range or taken is only found by creating the Service). Kinds
// the lab does not validate pass.
func Validate(obj runtime.Object) error { return defaultAndValidate(obj.DeepCopyObject()) }

// Default applies the API server's defaults to obj in place, for the
// kinds the lab defaults (see DefaultService, DefaultDeployment and
// DefaultStatefulSet); other kinds are left as they are.
func Default(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Service:
		DefaultService(o)
	case *appsv1.Deployment:
		DefaultDeployment(o)
	case *appsv1.StatefulSet:
		DefaultStatefulSet(o)
	}
}

// defaultAndValidate applies the API server's defaults to obj in place and
// validates it; the one switch by kind that creates, updates and Validate
// share. Kinds the lab does not validate pass.
func defaultAndValidate(obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Namespace:
		return ValidateNamespace(o)
	case *corev1.Service:
		DefaultService(o)
		return ValidateService(o)
	case *appsv1.Deployment:
		DefaultDeployment(o)
		return ValidateDeployment(o)
	case *appsv1.StatefulSet:
		DefaultStatefulSet(o)
		return ValidateStatefulSet(o)
	case *discoveryv1.EndpointSlice:
		return ValidateEndpointSlice(o)
	}
	return nil
}

// maxClientIPAffinitySeconds is the API server's upper bound on
// sessionAffinityConfig.clientIP.timeoutSeconds (core.MaxClientIPServiceAffinitySeconds).
const maxClientIPAffinitySeconds = 86400
