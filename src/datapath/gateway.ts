/**
 * The pod's fixed gateway. Every pod routes through the same link-local next hops; the
 * pod end pins them to the host device's MAC, so no ARP or neighbour discovery is needed
 * and no address is spent on the host side (the approach Calico and Cilium take).
 */
export const GATEWAY_V4 = "169.254.1.1";
export const GATEWAY_V6 = "fe80::1";
