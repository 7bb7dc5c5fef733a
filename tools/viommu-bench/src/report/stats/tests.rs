use super::*;

#[test]
fn median_min_max() {
    let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
    let s = Spread::of(&[4.0, 1.0, 2.0, 10.0]).unwrap();
    assert_eq!(s.median, 3.0);
    assert_eq!(Spread::of(&[]), None);
    assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
}

#[test]
fn significance_needs_disjoint_ranges_and_two_rounds() {
    let a = Spread::of(&[100.0, 110.0, 105.0]).unwrap();
    let b = Spread::of(&[120.0, 130.0]).unwrap();
    let c = Spread::of(&[108.0, 125.0]).unwrap();
    assert!(a.significantly_differs(&b));
    assert!(b.significantly_differs(&a));
    assert!(!a.significantly_differs(&c));
    // Touching ranges overlap.
    let d = Spread::of(&[110.0, 111.0]).unwrap();
    assert!(!a.significantly_differs(&d));
    // One round says nothing about noise.
    let one = Spread::of(&[500.0]).unwrap();
    assert!(!a.significantly_differs(&one));
}
